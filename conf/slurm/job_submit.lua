-- job_submit.lua: hold slurm-gavel managed jobs on arrival.
--
-- A job is managed when its comment starts with "gavel:" (the form
-- --comment=gavel:type=<job type>[,scale=N]; the SPANK plugin writes the same).
-- Slurm must never start such a job on its own: the gavel daemon picks its GPU
-- type and nodes each round, then releases it. Setting priority to 0 holds it
-- (the daemon's `scontrol release` lifts the hold).
--
-- Install: copy next to slurm.conf and set JobSubmitPlugins=lua.

local PREFIX = "gavel:"

local function managed(comment)
   return comment ~= nil and string.sub(comment, 1, #PREFIX) == PREFIX
end

-- GPUs in a request such as "gres:gpu:2" or "gres:gpu:v100:2"; nil when there is
-- no request, false when it cannot be read.
local function gpu_count(tres)
   if tres == nil or tres == "" then return nil end
   local count = string.match(tres, "gpu:(%d+)$") or string.match(tres, "gpu:[%w_.-]+:(%d+)$")
   if count == nil then return false end
   return tonumber(count)
end

function slurm_job_submit(job_desc, part_list, submit_uid)
   local comment = job_desc.comment
   if not managed(comment) then
      return slurm.SUCCESS
   end
   -- Catch the commonest mistake here, where the user sees the message at once;
   -- the daemon validates the full syntax (slurm_gavel.managed).
   if not string.find(comment, "type=", #PREFIX + 1, true) then
      slurm.log_user("slurm-gavel: --comment=%s names no job type; " ..
                     "write --comment=gavel:type=<job type>[,scale=N]", comment)
      return slurm.ERROR
   end
   -- Slurm 22.05 cannot later change an untyped GPU request (gpu:2) into a typed
   -- one (gpu:v100:2): "Invalid GRES specification (with and without type
   -- identification)". The daemon sets the typed request when it places the job,
   -- so move the GPU count into the comment and drop the request here.
   local per_node = gpu_count(job_desc.tres_per_node)
   local per_job = gpu_count(job_desc.tres_per_job)
   if per_node == false or per_job == false then
      slurm.log_user("slurm-gavel: cannot read the GPU request of a managed job; " ..
                     "drop --gres/--gpus and write --comment=gavel:type=<job type>,scale=N")
      return slurm.ERROR
   end
   local gpus = per_job
   if per_node ~= nil then
      local nodes = job_desc.min_nodes
      if nodes == nil or nodes < 1 or nodes > 100000 then nodes = 1 end  -- unset is NO_VAL
      gpus = per_node * nodes
   end
   if gpus ~= nil and not string.find(comment, "scale=", #PREFIX + 1, true) then
      job_desc.comment = comment .. ",scale=" .. gpus
   end
   if per_node ~= nil then job_desc.tres_per_node = "" end
   if per_job ~= nil then job_desc.tres_per_job = "" end
   job_desc.priority = 0
   return slurm.SUCCESS
end

-- Users may not release a managed job themselves (Slurm would then start it
-- wherever it fits) nor change its gavel comment; the daemon (root, or a uid
-- added to DAEMON_UIDS) may. Holding one's own job stays allowed.
local DAEMON_UIDS = { [0] = true }

local function set(value)
   return value ~= nil and value ~= slurm.NO_VAL and value ~= slurm.NO_VAL64
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   if DAEMON_UIDS[modify_uid] or not managed(job_rec.comment) then
      return slurm.SUCCESS
   end
   if set(job_desc.priority) and job_desc.priority ~= 0 then
      slurm.log_user("slurm-gavel: job %u is managed by the gavel scheduler, which " ..
                     "releases it when it places it; scancel it to withdraw it",
                     job_rec.job_id)
      return slurm.ERROR
   end
   if job_desc.comment ~= nil and job_desc.comment ~= job_rec.comment then
      slurm.log_user("slurm-gavel: the comment of managed job %u cannot be changed; " ..
                     "resubmit it instead", job_rec.job_id)
      return slurm.ERROR
   end
   return slurm.SUCCESS
end

return slurm.SUCCESS
