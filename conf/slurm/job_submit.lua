-- job_submit.lua: hold slurm-gavel managed jobs on arrival; refuse bad gavel comments.
--
-- A job is managed when its comment follows the slurm-gavel grammar
-- (gavel:[key=value,...], keys type (optional), scale, weight, steps, slo, grace; `gavel:`
-- alone is a managed job of no named type; the SPANK plugin writes the same). Slurm must never start such a job on its own: the gavel
-- daemon picks its GPU type and nodes each round, then releases it. Setting priority
-- to 0 holds it (the daemon's `scontrol release` lifts the hold).
--
-- One grammar, three enforcers: this file, slurm_gavel/domain/comment_grammar.py (the daemon) and
-- spank/gavel_grammar.h (the SPANK plugin) accept exactly the same comments
-- (tests/data/comment_grammar.json; spec in docs/admin-guide.md section 4). A
-- comment the daemon would refuse is refused here, at submit, with the reason.
--
-- Install: copy next to slurm.conf and set JobSubmitPlugins=lua. A site that already
-- has a job_submit.lua keeps it: install this one beside it under another name and
-- call it from the site's (docs/admin-guide.md section 4, "A site with its own
-- job_submit.lua").

-- The cap on the weight a user may give their own job (weight=W, --gavel-priority):
-- a user may only lower their share. Keep it equal to the daemon config's
-- weights.max_user_weight and the plugin's max_weight= (all default 1).
local MAX_USER_WEIGHT = "1"

-- Uids allowed to release managed jobs and to change gavel comments: the daemon
-- (root, or add the uid it runs as).
local DAEMON_UIDS = { [0] = true }

-- Where each user's last refusal is written (<dir>/<uid>), for `slurm-gavel refused`:
-- Slurm 22.05's sbatch and scontrol show a refusal as "Unspecified error", without the
-- reason given here (24.11+ show it). A folder owned by SlurmUser, not writable by
-- users (mode 0711: each file is read by its name); nil turns it off. Admin guide 4.
local REFUSALS_DIR = "/var/spool/slurm-gavel/refused"

local PREFIX = "gavel:"
local FORM = "gavel:[key=value,...] with keys type=<job type> (optional), scale=N or MIN-MAX, weight=W, steps=S, slo=SECONDS, grace=SECONDS"
local MAX_COMMENT_BYTES = 256
local MAX_TYPE_CHARS = 64
local MICRO = 1000000
local MAX_SCALE = 1024
local MAX_STEPS = 1000000000000
local MAX_GRACE = 86400
local MAX_SLO_MICRO = 1000000000 * MICRO
local KEYS = { type = true, scale = true, weight = true, steps = true, slo = true,
               grace = true, hold = true }
-- hold=user: the job is held by its owner (sbatch --hold, the owner's scontrol
-- hold/uhold), written here; the daemon never places it, and its owner's `scontrol
-- release` removes the key, handing the job back to the daemon (slurm_job_modify).
local USER_HOLD = "hold=user"

-- Explicit byte ranges, never %d/%s/%a: those follow the C locale.

-- integer = "0" / [1-9][0-9]{0,12}
local function parse_integer(s)
   if #s < 1 or #s > 13 or string.find(s, "[^0-9]") then return nil end
   if #s > 1 and string.sub(s, 1, 1) == "0" then return nil end
   return tonumber(s)
end

-- decimal = integer ["." 1-6 digits], integer part <= 10 digits; in millionths (exact
-- below 2^53, and a larger value is above every bound either way)
local function parse_decimal(s)
   local whole, frac = string.match(s, "^([^.]*)%.(.*)$")
   if whole == nil then whole, frac = s, "" 
   elseif #frac < 1 or #frac > 6 or string.find(frac, "[^0-9]") then return nil end
   if #whole > 10 then return nil end
   local w = parse_integer(whole)
   if w == nil then return nil end
   return w * MICRO + tonumber(frac .. string.rep("0", 6 - #frac))
end

local MAX_WEIGHT_MICRO = parse_decimal(MAX_USER_WEIGHT)
assert(MAX_WEIGHT_MICRO ~= nil and MAX_WEIGHT_MICRO > 0,
       "job_submit.lua: MAX_USER_WEIGHT must be a decimal > 0")

local function cap_text()
   return MAX_USER_WEIGHT
end

local function check_value(key, v)
   if key == "type" then
      if string.find(v, "[^A-Za-z0-9 ._()%-]") then
         return "the job type has a character outside A-Z a-z 0-9 space ._()-"
      end
      if #v > MAX_TYPE_CHARS then
         return "the job type is longer than " .. MAX_TYPE_CHARS .. " characters"
      end
      if string.sub(v, 1, 1) == " " or string.sub(v, -1) == " " then
         return "the job type starts or ends with a space"
      end
   elseif key == "scale" and string.find(v, "-", 1, true) then
      -- a range MIN-MAX (moldable), each a grammar integer 1..MAX_SCALE
      local lo, hi = string.match(v, "^([^-]*)%-([^-]*)$")
      local a, b = lo and parse_integer(lo), hi and parse_integer(hi)
      if a == nil or b == nil or a < 1 or b > MAX_SCALE or a > b then
         return string.format("scale=%s must be a whole number from 1 to %.0f, or a range " ..
                              "MIN-MAX of them with MIN <= MAX (e.g. 1-8)",
                              string.sub(v, 1, 40), MAX_SCALE)
      end
   elseif key == "scale" or key == "steps" or key == "grace" then
      local max = MAX_GRACE
      if key == "scale" then max = MAX_SCALE elseif key == "steps" then max = MAX_STEPS end
      local n = parse_integer(v)
      if n == nil or n < 1 or n > max then
         return string.format("%s=%s must be a whole number from 1 to %.0f", key,
                              string.sub(v, 1, 40), max)
      end
   elseif key == "hold" then
      if v ~= "user" then
         return "hold=" .. string.sub(v, 1, 40) .. " must be hold=user (or leave it out)"
      end
   elseif key == "slo" then
      local n = parse_decimal(v)
      if n == nil or n <= 0 or n > MAX_SLO_MICRO then
         return "slo=" .. string.sub(v, 1, 40) ..
                " must be seconds, a decimal > 0 and <= 1000000000"
      end
   elseif key == "weight" then
      local n = parse_decimal(v)
      if n == nil or n <= 0 then
         return "weight=" .. string.sub(v, 1, 40) .. " must be a decimal number > 0 (e.g. 0.5)"
      end
      if n > MAX_WEIGHT_MICRO then
         return "weight=" .. string.sub(v, 1, 40) .. " is above the cap " .. cap_text() ..
                " set by the admin: a job may only lower its own weight; the admin " ..
                "sets shares by QOS and account"
      end
   end
   return nil
end

-- "plain" (not ours), "managed" (with its keys) or "refuse" (with the reason).
local function classify(comment)
   if comment == nil or comment == "" then return "plain" end
   if string.sub(comment, 1, #PREFIX) ~= PREFIX then
      -- a near miss (" gavel:", "GAVEL:") is refused, never left plain
      local head = string.sub(string.gsub(comment, "^[ \t\n\v\f\r]*", ""), 1, #PREFIX)
      head = string.gsub(head, "[A-Z]", function(c) return string.char(string.byte(c) + 32) end)
      if head == PREFIX then
         return "refuse", "'gavel:' must open the comment, in lower case, with nothing before it"
      end
      return "plain"
   end
   if #comment > MAX_COMMENT_BYTES then
      return "refuse", "the comment is " .. #comment .. " bytes, more than " .. MAX_COMMENT_BYTES
   end
   local seen = {}
   local pos = #PREFIX + 1
   -- "gavel:" alone: managed, no type named (the daemon learns its speeds)
   if #comment == #PREFIX then return "managed", seen end
   while true do
      local comma = string.find(comment, ",", pos, true)
      local part = string.sub(comment, pos, comma and comma - 1 or -1)
      local eq = string.find(part, "=", 1, true)
      if eq == nil then
         return "refuse", "'" .. string.sub(part, 1, 40) .. "' is not key=value"
      end
      local key, value = string.sub(part, 1, eq - 1), string.sub(part, eq + 1)
      if not KEYS[key] then
         return "refuse", "unknown key '" .. string.sub(key, 1, 40) ..
                "' (known, in lower case: type, scale, weight, steps, slo, grace)"
      end
      if seen[key] then return "refuse", "key '" .. key .. "' appears twice" end
      if value == "" then return "refuse", "key '" .. key .. "' has no value" end
      local why = check_value(key, value)
      if why then return "refuse", why end
      seen[key] = value
      if comma == nil then break end
      pos = comma + 1
   end
   return "managed", seen
end

-- hold=user in a managed comment, added or removed (the comment must stay managed).
local function has_user_hold(comment)
   local verdict, seen = classify(comment)
   return verdict == "managed" and seen.hold ~= nil
end

local function with_user_hold(comment)
   local sep = ","
   if comment == PREFIX then sep = "" end  -- "gavel:" alone: no comma before the key
   local marked = comment .. sep .. USER_HOLD
   local verdict, why = classify(marked)
   if verdict ~= "managed" then return nil, why end
   return marked
end

local function without_user_hold(comment)
   local parts = {}
   for part in string.gmatch(string.sub(comment, #PREFIX + 1), "[^,]+") do
      if part ~= USER_HOLD then parts[#parts + 1] = part end
   end
   return PREFIX .. table.concat(parts, ",")
end

local function refuse(why)
   -- the reason is user text: an argument, never part of the format
   slurm.log_user("slurm-gavel: --comment refused: %s; write --comment='%s'", why, FORM)
   return slurm.ERROR
end

-- What a managed job cannot be, whatever its comment: the reason and the fix, else nil.
-- The daemon preempts a job by signalling its batch script to checkpoint and requeueing
-- it (`scontrol requeuehold`), so a managed job is a batch job that may be requeued.
-- * salloc, and srun outside an allocation, have no batch script (job_desc.script is
--   nil): placed, such a job could never be preempted;
-- * --no-requeue (job_desc.requeue 0; unset is NO_VAL16) asks what preemption undoes:
--   refused rather than silently turned into Requeue=1.
-- * a heterogeneous job (`sbatch ... : ...`, #SBATCH hetjob; job_desc.het_job_offset is
--   its component's index, NO_VAL for any other job): the daemon places and preempts
--   a job as one allocation of one GPU type, and only the first component carries
--   the batch script (the others would be refused below as salloc/srun jobs, which
--   they are not).
local function unmanageable(job_desc)
   local offset = job_desc.het_job_offset
   if offset ~= nil and offset ~= slurm.NO_VAL then
      return "heterogeneous jobs cannot be managed by the gavel scheduler: it places " ..
             "a job on one GPU type each round and preempts it whole, and cannot do " ..
             "either to the components of a heterogeneous job; submit each component " ..
             "as a job of its own (with --dependency=afterok:JOBID to chain them), or " ..
             "drop the gavel option to run it as a plain heterogeneous job"
   end
   if job_desc.script == nil or job_desc.script == "" then
      return "salloc and srun jobs cannot be managed by the gavel scheduler: it preempts " ..
             "a job by signalling its batch script to checkpoint and requeueing it, and " ..
             "an interactive allocation has no script to requeue; submit the work with " ..
             "sbatch, or drop the gavel option for a plain interactive allocation"
   end
   if job_desc.requeue == 0 then
      return "--no-requeue cannot be used with a gavel: job: the scheduler preempts it " ..
             "by requeueing it (it resumes from its checkpoint); drop --no-requeue, or " ..
             "drop the gavel option to run it as a plain job that is never requeued"
   end
   return nil
end

-- GPUs in a request such as "gres:gpu:2" or "gres:gpu:v100:2"; nil when there is
-- no request, false when it cannot be read.
local function gpu_count(tres)
   if tres == nil or tres == "" then return nil end
   local count = string.match(tres, "gpu:([0-9]+)$") or
                 string.match(tres, "gpu:[A-Za-z0-9_.-]+:([0-9]+)$")
   if count == nil or #count > 9 then return false end
   return tonumber(count)
end

-- --gpus-per-task: 22.05 "gres:gpu:2" / "gres:gpu:p100:2", 24.11+ "gres/gpu=2" /
-- "gres/gpu:p100=2", maybe beside "cpu=N". Returns the count (nil: none; false:
-- unreadable), the request's prefix with its type ("gres/gpu:p100") and the other entries.
local function task_gpus(tres)
   if tres == nil or tres == "" then return nil end
   local count, prefix, rest = nil, nil, {}
   for entry in string.gmatch(tres, "[^,]+") do
      local pre, n = string.match(entry, "^(gres[:/]gpu[:A-Za-z0-9_.-]*)[:=]([0-9]+)$")
      if pre ~= nil and count == nil and #n <= 9 then
         count, prefix = tonumber(n), pre
      elseif string.find(entry, "gpu", 1, true) then
         return false
      else
         rest[#rest + 1] = entry
      end
   end
   if count == nil then return nil end
   return count, prefix, table.concat(rest, ",")
end

-- A count Slurm leaves unset reads NO_VAL (4294967294), or NO_VAL16 (65534) for a
-- 16-bit field such as ntasks_per_node: nil here, as is anything below 1. A huge
-- count that is set stays as it is: the scale it makes is refused by the grammar's
-- bound, never read as a small one.
local function count(value, unset)
   if value == nil or value < 1 or value >= unset then return nil end
   return value
end

-- The job's layout as asked: its tasks (-n; else -N times --ntasks-per-node; else 1),
-- its tasks per node (--ntasks-per-node; nil: unset) and its nodes (-N; else its
-- tasks over --ntasks-per-node: `-n 4 --ntasks-per-node=2` is two nodes; else 1).
local function layout(job_desc)
   local tasks_per_node = count(job_desc.ntasks_per_node, 65534)
   local nodes = count(job_desc.min_nodes, 4294967294)
   local tasks = count(job_desc.num_tasks, 4294967294)
   if tasks == nil and nodes ~= nil and tasks_per_node ~= nil then
      tasks = nodes * tasks_per_node
   end
   if nodes == nil and tasks ~= nil and tasks_per_node ~= nil then
      nodes = math.ceil(tasks / tasks_per_node)
   end
   return tasks or 1, tasks_per_node, nodes or 1
end

-- Why a --gpus-per-task layout cannot be run under the daemon, else nil. The daemon
-- gives every node of a job the same GPU count, so each node must hold the same
-- number of tasks: -N N with a task count N does not divide (Slurm would put more
-- tasks on one node than its GPUs serve), or several GPUs per task over several
-- tasks with no layout to keep a task's GPUs on its node (a spread of 2+2 GPUs for
-- one 4-GPU task, say).
local function task_layout_why(per_task, tasks, tasks_per_node, min_nodes)
   local nodes = count(min_nodes, 4294967294)
   if tasks_per_node == nil and nodes ~= nil and nodes > 1 and tasks % nodes ~= 0 then
      return string.format("--gpus-per-task with %.0f tasks on %.0f nodes (-N) cannot " ..
                           "be managed: the gavel scheduler gives every node of a job " ..
                           "the same GPUs, so each node must run the same number of " ..
                           "tasks; give --ntasks-per-node=K with -N, or a task count " ..
                           "that -N divides", tasks, nodes)
   end
   if per_task > 1 and tasks > 1 and tasks_per_node == nil and nodes == nil then
      -- (-N 1, or one task, is kept on one node: slurm_job_submit)
      return string.format("--gpus-per-task=%.0f with %.0f tasks needs a layout to be " ..
                           "managed: the gavel scheduler may spread a job over several " ..
                           "nodes with the same GPUs on each, which could split a " ..
                           "task's GPUs over two nodes; add --ntasks-per-node=K (K " ..
                           "dividing %.0f: its tasks K to a node), or -N with a node " ..
                           "count dividing %.0f", per_task, tasks, tasks, tasks)
   end
   return nil
end

local function refuse_request(why)
   slurm.log_user("slurm-gavel: %s", why)
   return slurm.ERROR
end

-- The GPU type a request names ("gres:gpu:p100:2", "gres/gpu:p100:2"), nil if none.
local function gpu_type(tres)
   if tres == nil or tres == "" then return nil end
   return string.match(tres, "gpu:([A-Za-z0-9_.-]+):[0-9]+$")
end

-- What the GPU request of a managed job becomes (its count is in the comment's scale):
-- * untyped (gpu:2, --gpus=2): dropped; the daemon sets it per node when it places the
--   job (StartOrder.gres: untyped, the node list fixes the type);
-- * typed (gpu:p100:2, --gpus=p100:2): kept, per node, so the daemon reads the type
--   the user asked for (the only type it may give the job) and places it with the
--   same type (22.05 makes a job never runnable once an update changes its type);
-- * --mem-per-gpu with an untyped request: translated into memory per node (--mem) for
--   the GPUs per node asked, since the GPU request it is relative to is dropped;
--   --cpus-per-gpu likewise into CPUs per node (--mincpus): 24.11+ refuse either one
--   without a GPU request ("Invalid generic resource (gres) specification");
-- * --nodelist is refused: the daemon names the nodes of each placement, which would
--   overwrite it (--exclude and --constraint are kept and bind every placement).
-- Returns the reason for a refusal, else nil.
local function keep_request(job_desc, per_node, per_job, gpus)
   if job_desc.req_nodes ~= nil and job_desc.req_nodes ~= "" then
      return "--nodelist/-w cannot be used with a gavel: job: the daemon chooses its " ..
             "nodes each round; keep it off nodes with --exclude=NODES, or on a kind " ..
             "of node with --constraint=FEATURE or a typed --gres=gpu:TYPE:N"
   end
   local _, _, nodes = layout(job_desc)
   local typed = gpu_type(job_desc.tres_per_node) or gpu_type(job_desc.tres_per_job)
   local per_node_gpus = per_node
   if per_node_gpus == nil and gpus ~= nil then per_node_gpus = math.ceil(gpus / nodes) end
   if typed ~= nil then
      if per_node == nil then  -- --gpus=TYPE:N: per node, in the form Slurm gave
         job_desc.tres_per_node = string.gsub(job_desc.tres_per_job, ":[0-9]+$",
                                              ":" .. string.format("%.0f", per_node_gpus))
      end
      if per_job ~= nil then job_desc.tres_per_job = "" end
      return nil
   end
   local mem = job_desc.mem_per_tres
   if mem ~= nil and mem ~= "" then
      local mb = string.match(mem, "gpu:([0-9]+)$")
      if mb == nil or #mb > 12 or per_node_gpus == nil then
         return "cannot read --mem-per-gpu (" .. string.sub(mem, 1, 40) .. ") with the " ..
                "GPU request of this gavel: job; give --mem=MB per node instead"
      end
      job_desc.pn_min_memory = tonumber(mb) * per_node_gpus
      job_desc.mem_per_tres = ""
   end
   local cpg = job_desc.cpus_per_tres
   if cpg ~= nil and cpg ~= "" then  -- 24.11+ refuse it without a GPU request
      local n = string.match(cpg, "gpu:([0-9]+)$")
      if n == nil or #n > 6 or per_node_gpus == nil then
         return "cannot read --cpus-per-gpu (" .. string.sub(cpg, 1, 40) .. ") with the " ..
                "GPU request of this gavel: job; give --mincpus=N per node instead"
      end
      job_desc.pn_min_cpus = tonumber(n) * per_node_gpus
      job_desc.cpus_per_tres = ""
   end
   if per_node ~= nil then job_desc.tres_per_node = "" end
   if per_job ~= nil then job_desc.tres_per_job = "" end
   return nil
end

function slurm_job_submit(job_desc, part_list, submit_uid)
   local comment = job_desc.comment
   local verdict, detail = classify(comment)
   if verdict == "plain" then return slurm.SUCCESS end
   if verdict == "refuse" then return refuse(detail) end
   local cannot = unmanageable(job_desc)
   if cannot then
      slurm.log_user("slurm-gavel: %s", cannot)
      return slurm.ERROR
   end
   -- Slurm 22.05 cannot later change an untyped GPU request (gpu:2) into a typed
   -- one (gpu:v100:2): "Invalid GRES specification (with and without type
   -- identification)". The daemon sets the typed request when it places the job,
   -- so move the GPU count into the comment and drop the request here.
   local per_node = gpu_count(job_desc.tres_per_node)
   local per_job = gpu_count(job_desc.tres_per_job)
   local per_task, task_type, task_rest = task_gpus(job_desc.tres_per_task)
   if per_node == false or per_job == false or per_task == false then
      slurm.log_user("slurm-gavel: cannot read the GPU request of a managed job; " ..
                     "drop --gres/--gpus and write --comment=gavel:type=<job type>,scale=N")
      return slurm.ERROR
   end
   local gpus = per_job
   local tasks, tasks_per_node, nodes = layout(job_desc)
   if per_task ~= nil and per_job == nil and per_node == nil then
      local odd = task_layout_why(per_task, tasks, tasks_per_node, job_desc.min_nodes)
      if odd then return refuse_request(odd) end
      gpus = per_task * tasks
      -- as a per-job request from here on (the daemon sets it per node)
      job_desc.tres_per_job = task_type .. ":" .. string.format("%.0f", gpus)
      job_desc.tres_per_task = task_rest
      per_job = gpus
      if per_task > 1 and tasks_per_node == nil and tasks / nodes < 65534 then
         -- each task's GPUs on its own node: the daemon keeps a job with a task count
         -- per node on the nodes that count makes (backends/slurm/layout.py), where
         -- it may otherwise spread a job's GPUs over any number of nodes (one 2-GPU
         -- task as 1+1: its srun step cannot start). -N N: N nodes; else one task:
         -- one node (task_layout_why refused the rest)
         job_desc.ntasks_per_node = math.floor(tasks / nodes)
      end
   end
   if per_node ~= nil then gpus = per_node * nodes end
   if gpus ~= nil and detail.scale == nil then
      local sep = ","
      if comment == PREFIX then sep = "" end  -- "gavel:" alone: no comma before the key
      comment = comment .. sep .. "scale=" .. string.format("%.0f", gpus)
      -- the daemon reads the comment as stored: it must still follow the grammar
      local again, why = classify(comment)
      if again ~= "managed" then
         return refuse("with the GPU request moved into it, " .. why)
      end
      job_desc.comment = comment
   end
   local keep_why = keep_request(job_desc, per_node, per_job, gpus)
   if keep_why then return refuse_request(keep_why) end
   -- sbatch --hold (priority 0 asked at submit): the owner's hold, marked hold=user in
   -- the comment so that the daemon never places it until its owner releases it
   if job_desc.priority == 0 and not has_user_hold(job_desc.comment) then
      local marked, why = with_user_hold(job_desc.comment)
      if marked == nil then return refuse("with --hold marked in it, " .. why) end
      job_desc.comment = marked
   end
   job_desc.priority = 0
   -- Requeue-able whatever the site's JobRequeue (--no-requeue is refused above): the daemon
   -- preempts with `scontrol requeuehold`, which Slurm refuses for a job that is not
   -- ("Requested operation is presently disabled"). Only managed jobs: the site's
   -- default stays for every other job (admin guide section 3).
   job_desc.requeue = 1
   return slurm.SUCCESS
end

-- Users may not release a managed job themselves (Slurm would then start it
-- wherever it fits), nor make it not requeue-able (see slurm_job_submit), nor add,
-- remove or change a gavel comment on an existing job
-- (that would make a running job managed, or a held one unmanaged); the daemon
-- (DAEMON_UIDS) may. Holding one's own job stays allowed.

local function set(value)
   return value ~= nil and value ~= slurm.NO_VAL and value ~= slurm.NO_VAL64
end

-- A user's hold is the user's: the owner's `scontrol hold`/`uhold` of a
-- managed job adds hold=user to its comment (`sbatch --hold` too: slurm_job_submit),
-- and the daemon never places a job so marked; the owner's `scontrol release` of a job
-- so marked removes the key and leaves the job held, now by the daemon, which places
-- it when its turn comes. Nobody else's release passes either: the daemon's release
-- of a job its owner holds is refused (it read the job before the owner held it), and
-- the owner's release of a job the daemon holds is refused as before. The key is in
-- the comment, which only this file and the daemon's uids may change: a user can hold
-- their own job with it, never release one.
local function releases(job_desc)
   return set(job_desc.priority) and job_desc.priority ~= 0
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   local ours = classify(job_rec.comment) ~= "plain"
   local owner_holds = ours and has_user_hold(job_rec.comment)
   if DAEMON_UIDS[modify_uid] then
      -- the daemon may release a job its owner holds only by removing the key with it
      if owner_holds and releases(job_desc) and
         (job_desc.comment == nil or has_user_hold(job_desc.comment)) then
         slurm.log_user("slurm-gavel: job %u is held by its owner (hold=user in its " ..
                        "comment): only the owner's `scontrol release %u` hands it back",
                        job_rec.job_id, job_rec.job_id)
         return slurm.ERROR
      end
      return slurm.SUCCESS
   end
   if job_desc.comment ~= nil and job_desc.comment ~= job_rec.comment and
      (ours or classify(job_desc.comment) ~= "plain") then
      slurm.log_user("slurm-gavel: a gavel: comment cannot be added to, changed on or " ..
                     "removed from job %u; submit a new job instead", job_rec.job_id)
      return slurm.ERROR
   end
   if ours and job_desc.requeue == 0 then
      slurm.log_user("slurm-gavel: job %u is managed by the gavel scheduler, which " ..
                     "preempts it by requeueing it; it must stay requeue-able",
                     job_rec.job_id)
      return slurm.ERROR
   end
   if ours and releases(job_desc) and owner_holds then
      -- the owner's release of their own hold: the key goes, the job stays held by
      -- the daemon (Slurm would otherwise start it wherever it fits)
      job_desc.comment = without_user_hold(job_rec.comment)
      job_desc.priority = slurm.NO_VAL
      return slurm.SUCCESS
   end
   if ours and releases(job_desc) then
      slurm.log_user("slurm-gavel: job %u is managed by the gavel scheduler, which " ..
                     "releases it when it places it; scancel it to withdraw it",
                     job_rec.job_id)
      return slurm.ERROR
   end
   if ours and set(job_desc.nice) then
      -- slurmctld (priority/basic, 22.05-26.05) gives a held job whose nice changes the
      -- priority MAX(0 + old nice - new nice, 2): released, and started wherever it fits
      slurm.log_user("slurm-gavel: job %u is managed by the gavel scheduler: a nice " ..
                     "value would let Slurm start it outside the scheduler, and the " ..
                     "scheduler does not read it; to lower this job's share submit it " ..
                     "with --gavel-priority=W (weight=W, below 1), or hold it with " ..
                     "`scontrol hold %u`", job_rec.job_id, job_rec.job_id)
      return slurm.ERROR
   end
   if ours and set(job_desc.priority) and not owner_holds then
      -- the owner's hold or uhold: theirs until they release it
      local marked, why = with_user_hold(job_rec.comment)
      if marked == nil then
         slurm.log_user("slurm-gavel: job %u cannot be held by its owner: %s",
                        job_rec.job_id, why)
         return slurm.ERROR
      end
      job_desc.comment = marked
   end
   if ours and job_rec.priority == 0 and not set(job_desc.priority) then
      -- Any update of a held job Slurm found never runnable (BadConstraints, priority 0:
      -- the daemon placed it where it cannot run) recomputes its priority when the
      -- update names none: the owner's `scontrol update TimeLimit=...` would release
      -- it. Naming the priority it has (0) keeps the hold, and changes nothing else.
      job_desc.priority = 0
   end
   return slurm.SUCCESS
end

-- Each user's last refusal, also where 22.05 users can read it (REFUSALS_DIR): every
-- reason above goes through slurm.log_user, whose text is kept here and written by
-- uid when the submission or update is refused. The text is the daemon's own words
-- with at most 40 characters of the user's values in them; control characters are
-- replaced, the length bounded, the file name a number.
local last_message = nil
local real_log_user = slurm.log_user
slurm.log_user = function(fmt, ...)
   local ok, text = pcall(string.format, fmt, ...)
   if ok then last_message = text end
   return real_log_user(fmt, ...)
end

local function note_refusal(uid)
   if REFUSALS_DIR == nil or last_message == nil or uid == nil then return end
   if uid < 0 or uid > 4294967294 then return end
   local f = io.open(REFUSALS_DIR .. "/" .. string.format("%d", uid), "w")
   if f == nil then return end  -- no folder: the admin did not set it up
   local text = (string.gsub(string.sub(last_message, 1, 1000), "%c", " "))
   f:write(string.format("%d\t%s\n", os.time(), text))
   f:close()
end

local checks_submit, checks_modify = slurm_job_submit, slurm_job_modify

function slurm_job_submit(job_desc, part_list, submit_uid)
   last_message = nil
   local rc = checks_submit(job_desc, part_list, submit_uid)
   if rc ~= slurm.SUCCESS then note_refusal(submit_uid) end
   return rc
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   last_message = nil
   local rc = checks_modify(job_desc, job_rec, part_list, modify_uid)
   if rc ~= slurm.SUCCESS then note_refusal(modify_uid) end
   return rc
end

return slurm.SUCCESS
