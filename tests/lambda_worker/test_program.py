"""Program specs, Arrow IPC payloads and session descriptors: strict, stable values at the boundaries."""

from __future__ import annotations

import json

import polars as pl
import pyarrow as pa
import pytest
from polars.testing import assert_frame_equal

from core.errors import ConfigError, InputError
from core.offload_chains import offload_chains
from core.wire.arrow_ipc import checksum, decode, encode
from core.wire.descriptor import SessionDescriptor
from lambda_worker.program import MAX_SPEC_CHARS, ProgramCache, ProgramSpec
from lambda_worker.transient import TransientProgram
from tests.jobs import page_views, views

pytestmark = pytest.mark.timeout(30)

Q5 = ProgramSpec("q5", ("map1", "key_by2", "window_aggregate3"))


def test_program_ids_are_canonical_and_stable() -> None:
    assert Q5.program_id == ProgramSpec.loads(Q5.dumps()).program_id
    assert Q5.program_id == ProgramSpec("q5", ("map1~to", "key_by2~to", "window_aggregate3~to")).program_id
    assert Q5.program_id != ProgramSpec("q5", Q5.node_ids, window_slide_s=5).program_id
    assert Q5.program_id == "pd99e6b09ac7c69fc"  # pinned: ids cross process and version boundaries


def test_program_specs_reject_unknown_or_malformed_fields() -> None:
    with pytest.raises(ConfigError, match="unknown program fields"):
        ProgramSpec.from_json({**Q5.to_json(), "udf": "rm -rf"})
    with pytest.raises(ConfigError, match="params"):
        ProgramSpec.from_json({**Q5.to_json(), "params": {"window": 3}})
    with pytest.raises(ConfigError, match="node_ids"):
        ProgramSpec.from_json({"query": "q5", "node_ids": "map1"})
    with pytest.raises(ConfigError, match="JSON"):
        ProgramSpec.loads("{")


def test_the_cache_compiles_once_and_checks_ids() -> None:
    cache = ProgramCache()
    p = cache.get(Q5)
    assert cache.get_json(Q5.program_id, "") is p and len(cache) == 1
    other = ProgramSpec("q7", ("key_by1", "window_aggregate2"))
    with pytest.raises(ConfigError, match="hashes to"):
        cache.get_json("p0000000000000000", other.dumps())


@pytest.mark.parametrize("compression", ["zstd", "lz4", "none"])
def test_ipc_round_trip(compression: str) -> None:
    t = pa.table({"a": list(range(1000)), "s": ["x" * (i % 7) for i in range(1000)]})
    payload = encode(t, compression)
    assert decode(payload).equals(t)
    assert decode(encode(t.to_batches()[0], compression)).equals(t)
    assert checksum(payload) == checksum(bytes(payload)) != checksum(payload + b"!")


def test_ipc_rejects_garbage_and_unknown_codecs() -> None:
    with pytest.raises(InputError, match="not an Arrow IPC"):
        decode(b"garbage")
    with pytest.raises(InputError, match="compression"):
        encode(pa.table({"a": [1]}), "brotli")


def test_descriptors_round_trip_and_reject_skew() -> None:
    d = SessionDescriptor("s", "127.0.0.1:5", "tok", "w1", program=Q5.to_json())
    assert SessionDescriptor.from_event(d.to_event()) == d
    with pytest.raises(ConfigError, match="unknown session descriptor fields"):
        SessionDescriptor.from_event({**d.to_event(), "shiny": 1})
    with pytest.raises(ConfigError, match="lacks"):
        SessionDescriptor.from_event({"session_id": "s"})
    with pytest.raises(ConfigError, match="host:port"):
        SessionDescriptor("s", "localhost", "tok", "w1")
    with pytest.raises(ConfigError, match="non-negative"):
        SessionDescriptor("s", "h:1", "tok", "w1", idle_timeout_s=-1)


def test_a_jobs_own_plan_travels_in_its_spec_and_runs_as_the_plan_itself_does() -> None:
    plan, data = page_views(), views(5_000)
    (chain,) = offload_chains(plan)
    spec = ProgramSpec.of_plan(plan, chain.node_ids)
    back = ProgramSpec.loads(spec.dumps())
    assert back == spec and back.program_id == spec.program_id != ProgramSpec("q5", chain.node_ids).program_id
    ran = pl.from_arrow(back.compile().run_table(data))
    direct = pl.from_arrow(TransientProgram.from_plan(plan, chain.node_ids).run_table(data))
    assert isinstance(ran, pl.DataFrame) and isinstance(direct, pl.DataFrame) and ran.height > 0
    order = ["window_start", "page"]
    assert_frame_equal(ran.sort(order), direct.sort(order), check_exact=False)


def test_a_spec_with_a_malformed_plan_is_refused_when_read() -> None:
    plan = page_views()
    good = json.loads(ProgramSpec.of_plan(plan, ("filter1",)).dumps())
    good["plan"]["nodes"][1]["op"]["predicate"] = {"col": "no_such_column"}
    with pytest.raises(ConfigError, match=r"plan is malformed.*no_such_column"):
        ProgramSpec.from_json(good)
    with pytest.raises(ConfigError, match="over"):
        ProgramSpec.loads(" " * (MAX_SPEC_CHARS + 1))
