"""slurmrestd API version discovery and abilities, from /openapi/v3 excerpts
captured on the real 22.05, 24.11 and 26.05 slurmrestd (spec_excerpt keeps what
api_from_spec reads), and SlurmBackend choosing its paths from them."""

from __future__ import annotations

import pytest
from rest_replay import load, replay

from slurm_gavel.backends.slurm.rest.transport import rest_backend
from slurm_gavel.backends.slurm.rest.versions import (
    KNOWN_VERSIONS,
    RestApi,
    SlurmRestVersionError,
    api_from_spec,
    choose_version,
    offered_versions,
)
from slurm_gavel.errors import InputError

EXPECTED = {
    "22.05": RestApi("v0.0.38"),
    "24.11": RestApi(
        "v0.0.42",
        node_list=True,
        signal_batch_flag=True,
        batch_signal=True,
        requeue=False,
        job_states=True,
    ),
    "26.05": RestApi(
        "v0.0.45",
        node_list=True,
        signal_batch_flag=True,
        batch_signal=True,
        requeue=True,
        job_states=True,
    ),
}
OFFERED = {
    "22.05": ["v0.0.36", "v0.0.37", "v0.0.38"],
    "24.11": ["v0.0.40", "v0.0.41", "v0.0.42"],
    "26.05": ["v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"],
}


@pytest.mark.parametrize("release", sorted(EXPECTED))
def test_each_release_gets_its_newest_known_version_and_abilities(release):
    spec = load(release, "openapi-v3-excerpt.json")
    assert offered_versions(spec) == OFFERED[release]
    assert api_from_spec(spec) == EXPECTED[release]


@pytest.mark.parametrize("release", ["24.11", "26.05"])
def test_older_versions_of_a_release_have_fewer_abilities(release):
    """Every version a release offers was tried on the real daemon (admin guide 6)."""
    spec = load(release, "openapi-v3-excerpt.json")
    for v in OFFERED[release]:
        one = {**spec, "paths": {p: e for p, e in spec["paths"].items() if f"/{v}/" in p}}
        api = api_from_spec(one)
        assert api.version == v
        assert api.node_list and api.signal_batch_flag and api.batch_signal and api.job_states
        assert api.requeue == (v == "v0.0.45")
        assert not api.legacy


def test_no_version_in_common_is_refused_naming_both_sides():
    spec = load("24.11", "openapi-v3-excerpt.json")
    with pytest.raises(SlurmRestVersionError) as e:
        choose_version(offered_versions(spec), known=["v0.0.38"], where="slurmrestd at /s")
    msg = str(e.value)
    assert "slurmrestd at /s offers API versions v0.0.40, v0.0.41, v0.0.42" in msg
    assert "slurm-gavel knows v0.0.38" in msg and "upgrade slurm-gavel" in msg
    assert isinstance(e.value, InputError)


def test_a_server_older_than_known_says_upgrade_slurm():
    with pytest.raises(
        SlurmRestVersionError, match=r"offers API versions v0\.0\.36, v0\.0\.37;.*upgrade Slurm"
    ):
        choose_version(["v0.0.37", "v0.0.36"])


def test_versions_compare_as_numbers_not_text():
    assert (
        choose_version(["v0.0.9", "v0.0.40", "v0.0.100"], known=["v0.0.9", "v0.0.40"]) == "v0.0.40"
    )
    assert KNOWN_VERSIONS[0] == "v0.0.38" and KNOWN_VERSIONS[-1] == "v0.0.45"


def test_not_an_openapi_document_is_refused():
    with pytest.raises(SlurmRestVersionError, match="no 'paths'"):
        offered_versions({"errors": []})


@pytest.mark.parametrize("release", ["24.11", "26.05"])
def test_cluster_asks_for_the_discovered_version(tmp_path, release):
    """Before: /slurm/v0.0.38/nodes, which 24.11 and 26.05 answer with HTTP 404."""
    spec = load(release, "openapi-v3-excerpt.json")
    version = EXPECTED[release].version
    gone = load(release, "responses.json")["unknown_version"]

    def route(req):
        if req.path == "/openapi/v3":
            return 200, spec
        if req.path.startswith(f"/slurm/{version}/"):
            return 200, {"meta": {}, "errors": [], "jobs": []}
        return gone["status"], gone["response"]

    sock = tmp_path / "rest.sock"
    with replay(sock, route) as seen:
        b = rest_backend(sock)
        assert b.transport.api.version == version
        assert b.transport.call("observe", "GET", "/jobs")["jobs"] == []
    assert [r.path for r in seen] == ["/openapi/v3", f"/slurm/{version}/jobs"]


def test_a_version_gone_after_an_upgrade_is_discovered_again(tmp_path):
    from slurm_gavel.backends.slurm.rest.client import SlurmRestEndpointGone

    specs = [load("24.11", "openapi-v3-excerpt.json"), load("26.05", "openapi-v3-excerpt.json")]
    gone = load("26.05", "responses.json")["unknown_version"]
    served = {"spec": specs[0]}

    def route(req):
        if req.path == "/openapi/v3":
            return 200, served["spec"]
        if req.path.startswith(f"/slurm/{api_from_spec(served['spec']).version}/"):
            return 200, {"meta": {}, "jobs": []}
        return gone["status"], gone["response"]

    sock = tmp_path / "rest.sock"
    with replay(sock, route):
        b = rest_backend(sock)
        assert b.transport.api.version == "v0.0.42"
        served["spec"] = specs[1]  # slurmrestd upgraded to 26.05 under the daemon
        with pytest.raises(SlurmRestEndpointGone, match="HTTP 404"):
            b.transport.call("observe", "GET", "/jobs")
        assert b.transport.api.version == "v0.0.45"
