"""Which slurmrestd API version to speak, and what that version can do.

slurmrestd serves several ``/slurm/vX.Y.Z/...`` versions at once and each
release drops old ones (22.05: v0.0.36-v0.0.38; 24.11: v0.0.40-v0.0.42; 26.05:
v0.0.42-v0.0.45), so the version is read from the server's own OpenAPI document
(``GET /openapi/v3``) and the newest one this code knows is used. What a version
can do is read from the same document, and was checked on each real daemon
(tests/backends/slurm/rest/test_rest_transport.py, docs/admin-guide.md section 7):

============ ========== ========= ============= ============== ================
version      node list  signal    batch signal  requeue(hold)  Slurm
                        --batch   (one request)
============ ========== ========= ============= ============== ================
v0.0.38      no         no        no            no             22.05
v0.0.40-44   yes        yes       yes           no             24.11, 26.05
v0.0.45      yes        yes       yes           yes            26.05
============ ========== ========= ============= ============== ================

* node list: the job update schema has ``required_nodes`` (22.05's v0.0.38 has
  not, and answers "Disabled key");
* signal --batch: ``DELETE /job/{id}`` takes ``flags=BATCH_JOB`` (as
  ``scancel --batch``: only the batch shell gets the signal);
* batch signal: ``DELETE /jobs/`` with a ``kill_jobs_msg`` body (many jobs, one
  request);
* requeue: ``POST /jobs/requeue`` with ``flags: ["Hold"]`` (as ``scontrol
  requeuehold``);
* job states (v0.0.40+): ``GET /jobs/state/?job_id=A&job_id=B`` answers the
  states of those jobs only (the grace-period polls; a CSV list in one job_id
  is refused by 26.05 with HTTP 500, an unknown id is left out).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from slurm_gavel.errors import InputError

# The data_parser versions whose /jobs and /nodes documents slurm/from_json.py reads,
# oldest first. A version the server offers but this list lacks is never used.
KNOWN_VERSIONS: tuple[str, ...] = tuple(f"v0.0.{n}" for n in range(38, 46))

_VERSION_PATH = re.compile(r"^/slurm/(v\d+\.\d+\.\d+)/")


class SlurmRestVersionError(InputError):
    """slurmrestd offers no API version this code knows (or no OpenAPI document)."""


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.lstrip("v").split("."))


def offered_versions(spec: Mapping[str, Any]) -> list[str]:
    """The /slurm/vX.Y.Z versions an OpenAPI document lists, oldest first."""
    paths = spec.get("paths") if isinstance(spec, Mapping) else None
    if not isinstance(paths, Mapping):
        raise SlurmRestVersionError(
            "slurmrestd's /openapi/v3 has no 'paths' object; is this slurmrestd (Slurm >= 22.05)?"
        )
    found = {m.group(1) for p in paths if isinstance(p, str) for m in [_VERSION_PATH.match(p)] if m}
    return sorted(found, key=_key)


def choose_version(
    offered: Iterable[str], known: Iterable[str] = KNOWN_VERSIONS, where: str = "slurmrestd"
) -> str:
    """The newest version both sides know; a clear refusal when there is none."""
    offered, known = sorted(set(offered), key=_key), sorted(set(known), key=_key)
    common = [v for v in offered if v in known]
    if common:
        return common[-1]
    newer = bool(offered) and _key(offered[0]) > _key(known[-1])
    fix = (
        "upgrade slurm-gavel to a release that knows these versions"
        if newer
        else "upgrade Slurm (slurm-gavel needs Slurm >= 22.05) or enable one of the known "
        "versions in slurmrestd (-s openapi/...)"
    )
    raise SlurmRestVersionError(
        f"{where} offers API versions {', '.join(offered) or '(none)'}; slurm-gavel knows "
        f"{', '.join(known)}; no version in common: {fix}, or use backend: cli"
    )


@dataclass(frozen=True)
class RestApi:
    """One API version of one slurmrestd and what it can do (read from its spec)."""

    version: str
    node_list: bool = False  # job update takes required_nodes
    signal_batch_flag: bool = False  # DELETE /job/{id}?flags=BATCH_JOB
    batch_signal: bool = False  # DELETE /jobs/ with a kill_jobs_msg
    requeue: bool = False  # POST /jobs/requeue {"flags": ["Hold"], "jobs": [...]}
    job_states: bool = False  # GET /jobs/state/?job_id=A&job_id=B (states only)

    @property
    def base(self) -> str:
        return f"/slurm/{self.version}"

    @property
    def legacy(self) -> bool:
        """v0.0.38 (22.05): job updates use gres / nodes [min, max], not tres_per_node."""
        return _key(self.version) < (0, 0, 39)


def api_from_spec(spec: Mapping[str, Any], where: str = "slurmrestd") -> RestApi:
    """Pick the version (see choose_version) and read its abilities from the spec."""
    version = choose_version(offered_versions(spec), where=where)
    paths: Mapping[str, Any] = spec["paths"]
    base = f"/slurm/{version}"

    def op(path: str, method: str) -> Mapping[str, Any] | None:
        # 24.11+ list some collections with a trailing slash (/jobs/), 22.05 without.
        for p in (base + path, base + path.rstrip("/"), base + path + "/"):
            entry = paths.get(p)
            if isinstance(entry, Mapping) and isinstance(entry.get(method), Mapping):
                return entry[method]
        return None

    kill = op("/job/{job_id}", "delete") or {}
    flags = [
        prm.get("schema", {}).get("enum") or []
        for prm in kill.get("parameters") or []
        if isinstance(prm, Mapping) and prm.get("name") == "flags"
    ]
    update = op("/job/{job_id}", "post") or {}
    return RestApi(
        version=version,
        node_list="required_nodes" in _body_properties(spec, update),
        signal_batch_flag=any("BATCH_JOB" in f for f in flags),
        batch_signal=op("/jobs/", "delete") is not None,
        requeue=op("/jobs/requeue", "post") is not None,
        job_states=op("/jobs/state/", "get") is not None,
    )


def _body_properties(spec: Mapping[str, Any], operation: Mapping[str, Any]) -> set[str]:
    """Property names of an operation's JSON request body ($ref into components)."""
    content = (operation.get("requestBody") or {}).get("content") or {}
    schema = (content.get("application/json") or {}).get("schema") or {}
    ref = schema.get("$ref", "")
    name = ref.rsplit("/", 1)[-1] if ref.startswith("#/components/schemas/") else ""
    target = ((spec.get("components") or {}).get("schemas") or {}).get(name) or schema
    props = target.get("properties") if isinstance(target, Mapping) else None
    return set(props) if isinstance(props, Mapping) else set()


def spec_excerpt(spec: Mapping[str, Any]) -> dict[str, Any]:
    """What api_from_spec reads, and nothing else: small test fixtures from a real
    /openapi/v3 (tests/backends/data/rest/<release>/openapi-v3-excerpt.json)."""
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    for path, entry in (spec.get("paths") or {}).items():
        if not _VERSION_PATH.match(path) or not isinstance(entry, Mapping):
            continue
        out: dict[str, Any] = {}
        for method, operation in entry.items():
            if method not in ("get", "post", "delete", "put", "patch"):
                continue
            keep: dict[str, Any] = {}
            if path.endswith("/job/{job_id}") and method == "delete":
                keep["parameters"] = [
                    {"name": p.get("name"), **({"schema": {"enum": p["schema"]["enum"]}}
                                               if (p.get("schema") or {}).get("enum") else {})}
                    for p in operation.get("parameters") or []
                ]  # fmt: skip
            if path.endswith("/job/{job_id}") and method == "post":
                keep["requestBody"] = {"content": {"application/json": {"schema": (
                    ((operation.get("requestBody") or {}).get("content") or {})
                    .get("application/json", {}).get("schema", {}))}}}  # fmt: skip
                ref = keep["requestBody"]["content"]["application/json"]["schema"].get("$ref", "")
                name = ref.rsplit("/", 1)[-1]
                props = spec["components"]["schemas"].get(name, {}).get("properties", {})
                schemas[name] = {"properties": {k: {} for k in sorted(props)}}
            out[method] = keep
        paths[path] = out
    return {
        "info": {"version": (spec.get("info") or {}).get("version")},
        "paths": paths,
        "components": {"schemas": schemas},
    }
