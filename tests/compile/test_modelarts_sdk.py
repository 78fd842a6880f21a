"""hacfg against Huawei Cloud's own ModelArts SDK (``huaweicloudsdkmodelarts``), the ground truth of the
request and response bodies: the committed schema is generated from it, bodies it makes lint and
round-trip, bodies hacfg makes deserialise into its ``Job``, and its real client carries them."""

from __future__ import annotations

import importlib.util
import json

import pytest
from kit.cli import findings
from kit.packaging import imported_modules
from kit.paths import REPO

from hacfg.scenario.modelarts import SUPERNODE_FLAVOR

pytest.importorskip("huaweicloudsdkmodelarts", reason="the ModelArts SDK is a test extra: pip install -e '.[test]'")

SCHEMA = REPO / "schemas" / "modelarts-training-job.schema.json"


def generator():
    spec = importlib.util.spec_from_file_location("modelarts_schema", REPO / "scripts" / "modelarts_schema.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # importing the SDK's 1,279 model modules takes a second or two
def test_the_committed_schema_is_what_the_sdk_generates():
    made = generator()
    assert SCHEMA.read_text(encoding="utf-8") == made.render(made.generate()), (
        "schemas/modelarts-training-job.schema.json is stale: run python scripts/modelarts_schema.py"
    )


@pytest.mark.slow
def test_no_command_imports_the_sdk(tmp_path):
    """It is installed here, and costs more to import than a whole lint: hacfg reads the schema made from it."""
    body = tmp_path / "job.json"
    body.write_text(json.dumps({"kind": "job", "metadata": {"name": "j"}, "algorithm": {"environments": [{"A": "1"}]},
                                "spec": {"resource": {"flavor_id": "modelarts.vm.gpu.t4u8"}, "volume": []}}))
    for command in (("lint", body), ("import", body, "-o", tmp_path / "ha.yaml"), ("build", tmp_path / "ha.yaml")):
        assert not {name for name in imported_modules(*command) if name.startswith("huaweicloudsdk")}, command


def test_the_schema_states_what_the_sdk_docstrings_state():
    schema = json.loads(SCHEMA.read_text())
    defs = schema["$defs"]
    assert defs["SchedulePolicy"]["properties"]["priority"]["minimum"] == 0
    assert defs["SchedulePolicy"]["properties"]["priority"]["maximum"] == 3
    assert "JobHanged" in defs["Notification"]["properties"]["events"]["items"]["x-documented"]
    assert defs["Nfs"]["properties"]["read_only"]["type"] == ["boolean", "null"]
    assert defs["Spec"]["additionalProperties"] is False
    assert ["metadata", "id"] in schema["x-read-only"] and ["status"] in schema["x-read-only"]
    # the dedicated pools' flavors; 16xlarge, which only Ascend supernode pools have, is what lint reads as an NPU
    assert SUPERNODE_FLAVOR in defs["SpecResource"]["properties"]["flavor_id"]["examples"]


# The SDK's own classes, as a user of it writes a job, and the shape it sends (sanitize_for_serialization).
def sdk_job(*, flavor: str, annotations: dict[str, str], pool: str | None = "pool-1234"):
    from huaweicloudsdkmodelarts.v1 import model as m

    return m.Job(
        kind="job",
        metadata=m.JobMetadata(name="llama-pretrain", description="adopted", annotations=annotations),
        algorithm=m.JobAlgorithm(
            engine=m.JobEngine(image_url="org/train:1.0"),
            command="bash run.sh",
            parameters=[m.Parameters(name="lr", value="0.0001")],
            inputs=[m.Input(name="data_url", remote=m.InputDataInfo(obs=m.InputDataInfoObs(obs_url="/bucket/data/")))],
            outputs=[m.Output(name="train_url", remote=m.Remote(obs=m.RemoteObs(obs_url="/bucket/ckpt/")))],
            local_code_dir="/home/work/code",
            environments={"NCCL_DEBUG": "INFO", "MA_HANG_DETECT_TIME": "45"},
        ),
        spec=m.Spec(
            resource=m.SpecResource(flavor_id=flavor, node_count=2, pool_id=pool),
            volumes=[m.SpecVolumes(nfs=m.Nfs(nfs_server_path="192.168.0.82:/", local_path="/mnt/sfs", read_only=False))],
            log_export_path=m.LogExportPath(obs_url="/bucket/logs/"),
            schedule_policy=m.SchedulePolicy(priority=2, preemptible=False),
            notification=m.Notification(topic_urn="urn:smn:cn-north-4:0:ha", events=["JobHanged", "JobRestarted"]),
        ),
    )


RETRIES = {"fault-tolerance/job-retry-num": "3", "fault-tolerance/job-unconditional-retry": "true", "fault-tolerance/hang-retry": "true"}
SDK_JOBS = {
    "gpu-public": {"flavor": "modelarts.vm.gpu.t4u8", "annotations": RETRIES, "pool": None},
    "gpu-or-ascend-pool": {"flavor": "modelarts.pool.visual.8xlarge", "annotations": RETRIES},
    "ascend-supernode": {"flavor": "modelarts.pool.visual.16xlarge", "annotations": {**RETRIES, "fault-tolerance/hccl_op_retry": "true"}},
}


def sent(job) -> dict:
    from huaweicloudsdkcore.utils.http_utils import sanitize_for_serialization

    return json.loads(json.dumps(sanitize_for_serialization(job)))


@pytest.mark.parametrize("name", SDK_JOBS)
def test_a_body_the_sdk_makes_lints_without_false_findings_and_round_trips(cli, tmp_path, name):
    body = tmp_path / "job.json"
    body.write_text(json.dumps(sent(sdk_job(**SDK_JOBS[name])), indent=2))
    # one true finding: on Ascend, HCCL's default execution timeout (1836 s) ends a stuck collective
    # before the platform's hang detection (MA_HANG_DETECT_TIME 45 min) can call it a hang
    expected = [("HA040", "HCCL's execution timeout (default 1836 s)")] if name == "ascend-supernode" else []
    assert [(f["rule"], f["message"][:41]) for f in findings(cli, body)] == expected
    imported = tmp_path / "ha.yaml"
    result = cli("import", body, "-o", imported)
    assert result.code == 0, result.err
    built = cli("build", imported)
    assert built.code == 0, built.err
    assert json.loads(built.out) == json.loads(body.read_text())


def strictly(data, kind: str, at: str = "") -> None:
    """``data`` read as the SDK's ``kind`` with every key known and every type right; the SDK itself drops what it
    does not know and converts what it can."""
    from huaweicloudsdkmodelarts.v1 import model as m

    scalars = {"str": str, "int": int, "float": (int, float), "bool": bool}
    if kind in scalars:
        assert isinstance(data, scalars[kind]) and (kind == "bool" or not isinstance(data, bool)), f"{at}: {data!r} is no {kind}"
    elif kind.startswith("list["):
        assert isinstance(data, list), f"{at}: not a list"
        for index, item in enumerate(data):
            strictly(item, kind[5:-1], f"{at}[{index}]")
    elif kind.startswith("dict("):
        assert isinstance(data, dict), f"{at}: not a mapping"
        for key, value in data.items():
            strictly(value, kind.partition(", ")[2][:-1], f"{at}.{key}")
    else:
        cls = getattr(m, kind)
        names = {json_name: attribute for attribute, json_name in cls.attribute_map.items()}
        assert isinstance(data, dict), f"{at}: not an object"
        for key, value in data.items():
            assert key in names, f"{at}.{key}: {kind} has no such field"
            strictly(value, cls.openapi_types[names[key]], f"{at}.{key}")


def built_bodies(cli, tmp_path):
    """What hacfg builds: every preset, on a GPU flavor, on a dedicated pool, on an Ascend supernode."""
    jobs = {
        "gpu": "{image: org/train:1.0, command: bash run.sh, flavor: modelarts.vm.gpu.t4u8, environment: {NCCL_DEBUG: INFO}}",
        "pool": "{image: org/train:1.0, command: bash run.sh, pool: pool-1234, nodes: 4}",
        "npu": "{image: org/train:1.0, command: bash run.sh, flavor: modelarts.pool.visual.16xlarge, pool: pool-1234, accelerator: npu}",
    }
    for preset in ("single-node", "multi-node", "llm-long-term"):
        for name, job in jobs.items():
            scenario = tmp_path / f"{preset}-{name}.yaml"
            extra = "operator_retry: true\nhang: {timeout: 45m}\nprecheck: false\n" if name == "npu" else ""
            passthrough = "passthrough: {spec: {log_export_path: {obs_url: /bucket/logs/}}}\n"
            scenario.write_text(f"version: 1\nscenario: {preset}\njob: {job}\n{extra}{passthrough}")
            result = cli("build", scenario)
            assert result.code == 0, result.err
            yield scenario.name, json.loads(result.out)


def test_the_schema_is_no_stricter_than_the_sdk_client():
    """The SDK checks no value its docstrings list, and sends a Job without kind (its default is job):
    the schema lists the values for lint (x-documented), where build would refuse an enum."""
    from huaweicloudsdkmodelarts.v1 import model as m

    schema = json.loads(SCHEMA.read_text())
    assert "kind" not in schema["required"] and schema["properties"]["kind"]["default"] == "job"
    assert "**默认取值**：job" in m.Job.kind.fget.__doc__ and m.Job().kind is None
    assert m.LogExportConfig(version="v2").version == "v2"  # no check in the setter
    assert "enum" not in SCHEMA.read_text()


def test_a_body_the_sdk_sends_without_kind_or_with_a_newer_value_builds_and_lints_with_a_warning(cli, tmp_path):
    from huaweicloudsdkmodelarts.v1 import model as m

    job = sdk_job(flavor="modelarts.vm.gpu.t4u8", annotations=RETRIES, pool=None)
    job.kind = None
    job.spec.log_export_config = m.LogExportConfig(version="v2")
    body = tmp_path / "job.json"
    body.write_text(json.dumps(sent(job), indent=2))
    assert "kind" not in json.loads(body.read_text())
    assert [(f["rule"], f["severity"], f["logical_path"]) for f in findings(cli, body)] == [
        ("HA104", "warning", "spec.log_export_config.version")]
    scenario = tmp_path / "ha.yaml"
    scenario.write_text("version: 1\nscenario: single-node\njob: {name: adopted}\n")
    built = cli("build", "--only", "annotations", "--into", body, scenario, "-o", tmp_path / "merged.json")
    assert built.code == 0, built.err
    merged = json.loads((tmp_path / "merged.json").read_text())
    assert "kind" not in merged and merged["spec"]["log_export_config"] == {"version": "v2"}


def test_every_body_hacfg_builds_deserialises_strictly_into_the_sdks_job(cli, tmp_path):
    from huaweicloudsdkcore.utils.http_utils import sanitize_for_serialization
    from huaweicloudsdkmodelarts.v1 import ModelArtsClient

    client = ModelArtsClient()
    for name, body in built_bodies(cli, tmp_path):
        strictly(body, "Job", name)
        assert sanitize_for_serialization(client._deserialize(body, "Job")) == body, name  # nothing dropped, nothing changed


@pytest.fixture
def modelarts_api():
    """A ModelArts endpoint on 127.0.0.1: it keeps each training job created and answers its details as the
    platform does (read-only fields added), and the SDK's real client pointed at it, with fake credentials."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from huaweicloudsdkcore.auth.credentials import BasicCredentials
    from huaweicloudsdkmodelarts.v1 import ModelArtsClient

    jobs: dict[str, dict] = {}
    received: list[tuple[str, bytes]] = []

    class Api(BaseHTTPRequestHandler):
        def do_POST(self):
            raw = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((self.path, raw))
            job = json.loads(raw)
            job["metadata"] |= {"id": f"job-{len(jobs)}", "create_time": 1764590000000, "user_name": "alice"}
            job["status"] = {"phase": "Creating", "duration": 0}
            job["spec"]["resource"]["flavor_name"] = "GPU: 1*NVIDIA-T4(16GB)"
            jobs[job["metadata"]["id"]] = job
            self.reply(201, job)

        def do_GET(self):
            self.reply(200, jobs[self.path.rpartition("/")[2]])

        def reply(self, code, body):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Api)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    credentials = BasicCredentials("FAKEACCESSKEY0000000", "fake-secret-key-0000000000000000000000", "0" * 32)
    client = (
        ModelArtsClient.new_builder()
        .with_credentials(credentials)
        .with_endpoints([f"http://127.0.0.1:{server.server_address[1]}"])
        .build()
    )
    yield client, received
    server.shutdown()
    server.server_close()


def test_the_sdk_client_carries_hacfgs_body_and_a_fetched_job_is_adopted(cli, tmp_path, modelarts_api):
    from huaweicloudsdkmodelarts.v1 import CreateTrainingJobRequest, ShowTrainingJobDetailsRequest

    client, received = modelarts_api
    scenario = tmp_path / "ha.yaml"
    scenario.write_text(
        "version: 1\nscenario: multi-node\n"
        "job: {image: org/train:1.0, command: bash run.sh, flavor: modelarts.vm.gpu.t4u8, nodes: 2}\n"
        "checkpoint: {path: /mnt/sfs/ckpt, interval: 30m, resume: true}\nhang: {timeout: 45m}\n"
        "passthrough: {spec: {volumes: [{nfs: {nfs_server_path: '192.168.0.82:/', local_path: /mnt/sfs, read_only: false}}]}}\n"
    )
    body = json.loads(cli("build", scenario).out)

    created = client.create_training_job(CreateTrainingJobRequest(body=body))
    (path, raw), = received
    assert path == f"/v2/{'0' * 32}/training-jobs"
    assert json.loads(raw) == body  # carried unchanged

    fetched = client.show_training_job_details(ShowTrainingJobDetailsRequest(training_job_id=created.metadata.id))
    shown = tmp_path / "fetched.json"
    shown.write_text(str(fetched))  # print(resp): environments as the SDK's list of pairs, read-only fields
    assert isinstance(json.loads(shown.read_text())["algorithm"]["environments"], list)
    adopted = tmp_path / "adopted.yaml"
    imported = cli("import", shown, "-o", adopted)
    assert imported.code == 0, imported.err
    rebuilt = cli("build", adopted)
    assert rebuilt.code == 0, rebuilt.err
    assert json.loads(rebuilt.out) == body
