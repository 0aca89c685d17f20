"""The container and deployment files, checked by real validators that work offline.

- requirements.lock: covers every runtime dependency of pyproject.toml, hash-pinned, closed.
- Dockerfile: parsed by dockerfile-parse; multi-stage, lock install, non-root, HEALTHCHECK on
  /readyz (its one-liner is run against a live HTTP server), `genai serve` entry point.
- deploy/docker-compose.yml: the compose-spec JSON schema (vendored in tests/schemas from the
  check-jsonschema package), plus `docker compose config` where that CLI is installed.
- deploy/k8s/*.yaml: kubernetes-validate (it bundles the Kubernetes schemas), strict mode; then
  the migration Job's command and a replica built from the Deployment's environment, ConfigMaps
  and Secret keys are run for real (SQLite and PostgreSQL): ready, and completing a pattern.

A validator that is missing fails these tests under CI (env CI set) and skips them elsewhere.
"""

from __future__ import annotations

import asyncio
import http.server
import importlib
import importlib.metadata
import json
import os
import re
import shutil
import sys
import threading
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import pytest
import yaml
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from app.catalog.catalog import PatternCatalog
from app.config import Settings, get_settings
from app.errors import ConfigurationError
from app.store.secrets import decode_key, new_key_text
from tests.fakes.provider_server import FakeProviderServer
from tests.processes import run_process
from tests.support import OPENAI_KEY, REPO_ROOT, SHIPPED_PATTERNS, run_cli, serve_app

DOCKERFILE = REPO_ROOT / "Dockerfile"
LOCK = REPO_ROOT / "requirements.lock"
BUILD_LOCK = REPO_ROOT / "requirements-build.lock"
DEPLOY = REPO_ROOT / "deploy"
COMPOSE = DEPLOY / "docker-compose.yml"
ENV_EXAMPLE = DEPLOY / ".env.example"
GENAI_YAML = DEPLOY / "genai.yaml"
K8S = DEPLOY / "k8s"
COMPOSE_SCHEMA = REPO_ROOT / "tests" / "schemas" / "compose-spec.json"
# The oldest Kubernetes release the manifests promise to work on, and the newest the validator
# knows (checked against both, so neither a removed nor a too-new field slips in).
OLDEST_KUBERNETES = "1.29.0"
# What the service must be given in every deployment (documented, required, shared by replicas).
SERVICE_KEYS = (
    "GENAI_DATA_KEY",
    "GENAI_REDACTION_KEY",
    "GENAI_AUTH_SECRET",
    "GENAI_SIGNING__KEY",  # signed envelopes (issue 20)
)
STORE_URLS = ("GENAI_DATABASE_URL", "GENAI_REDIS_URL")
PROVIDER_KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")
# The platform the lock is compiled for (the image's): Python 3.11 on Linux.
IMAGE_MARKERS: dict[str, str] = {
    **{name: str(value) for name, value in default_environment().items()},
    "python_version": "3.11",
    "python_full_version": "3.11.7",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "os_name": "posix",
    "platform_python_implementation": "CPython",
    "implementation_name": "cpython",
}


def require(module: str, *, install: str) -> ModuleType:
    """The validator module; its absence fails under CI (it must run there), skips elsewhere."""
    try:
        return importlib.import_module(module)
    except ImportError:
        message = f"{module} is not installed: pip install {install} (or -e '.[dev]')"
        if os.environ.get("CI"):
            pytest.fail(message + " (CI must validate the deployment files, so this fails)")
        pytest.skip(message)


# --- the lock file --------------------------------------------------------------------------


def _locked() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for line in LOCK.read_text(encoding="utf-8").splitlines():
        if match := re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line):
            pins[canonicalize_name(match[1])] = Version(match[2])
    return pins


def _applies(requirement: Requirement, extra: str = "") -> bool:
    if requirement.marker is None:
        return not extra
    return requirement.marker.evaluate({**IMAGE_MARKERS, "extra": extra})


def test_lock_pins_every_runtime_dependency_at_an_allowed_version() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    locked = _locked()
    problems = []
    for text in project["project"]["dependencies"]:
        requirement = Requirement(text)
        if not _applies(requirement):
            continue
        name = canonicalize_name(requirement.name)
        if name not in locked:
            problems.append(f"{text}: not in requirements.lock")
        elif not requirement.specifier.contains(locked[name], prereleases=True):
            problems.append(f"{text}: the lock pins {locked[name]}")
        # An extra (uvicorn[standard]) brings requirements of its own: locked as well.
        for extra in requirement.extras:
            for extra_text in importlib.metadata.requires(requirement.name) or []:
                needed = Requirement(extra_text)
                if _applies(needed, extra) and canonicalize_name(needed.name) not in locked:
                    problems.append(f"{text}: its extra needs {needed.name}, not locked")
    assert not problems, "regenerate requirements.lock (command in its header):\n" + "\n".join(
        problems
    )


def test_lock_is_closed_so_installing_it_without_resolving_is_complete() -> None:
    """The image installs the lock with --no-deps: every locked package's own requirements must
    be locked too (checked from the installed metadata of each package at its locked version)."""
    locked = _locked()
    missing = []
    checked = 0
    for name, version in locked.items():
        try:
            distribution = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if Version(distribution.version) != version:
            continue
        checked += 1
        for text in distribution.requires or []:
            needed = Requirement(text)
            if _applies(needed) and canonicalize_name(needed.name) not in locked:
                missing.append(f"{name} needs {text}")
    # Meaningful only while the test environment runs (mostly) the locked versions.
    assert checked >= len(locked) // 2, f"only {checked} locked versions are installed"
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize("lock", [LOCK, BUILD_LOCK], ids=lambda path: path.name)
def test_every_locked_distribution_is_pinned_by_hash(lock: Path) -> None:
    entries = re.split(r"\n(?=[A-Za-z0-9])", lock.read_text(encoding="utf-8"))
    pinned = [entry for entry in entries if re.match(r"^[A-Za-z0-9][\w.-]*==", entry)]
    assert pinned
    unhashed = [e.split()[0] for e in pinned if not re.search(r"--hash=sha256:[0-9a-f]{64}", e)]
    assert not unhashed


def test_build_lock_satisfies_the_build_system() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    text = BUILD_LOCK.read_text(encoding="utf-8")
    pins = {
        canonicalize_name(m[1]): Version(m[2])
        for m in re.finditer(r"^([A-Za-z0-9][\w.-]*)==(\S+)", text, flags=re.MULTILINE)
    }
    for required in project["build-system"]["requires"]:
        requirement = Requirement(required)
        assert requirement.specifier.contains(pins[canonicalize_name(requirement.name)])


# --- the Dockerfile -----------------------------------------------------------------------


def _instructions() -> list[dict[str, Any]]:
    dockerfile_parse = require("dockerfile_parse", install="dockerfile-parse")
    parser = dockerfile_parse.DockerfileParser(path=str(DOCKERFILE))
    assert parser.is_multistage
    return [i for i in parser.structure if i["instruction"] != "COMMENT"]


def _final_stage() -> list[dict[str, Any]]:
    instructions = _instructions()
    last_from = max(i for i, step in enumerate(instructions) if step["instruction"] == "FROM")
    return instructions[last_from:]


def _one(stage: list[dict[str, Any]], instruction: str) -> str:
    values = [step["value"] for step in stage if step["instruction"] == instruction]
    assert len(values) == 1, f"expected one {instruction} in the final stage, got {values}"
    return str(values[0])


def _env(stage: list[dict[str, Any]]) -> dict[str, str]:
    found: dict[str, str] = {}
    for step in stage:
        if step["instruction"] == "ENV":
            found.update(dict(pair.split("=", 1) for pair in step["value"].split()))
    return found


def test_dockerfile_is_multi_stage_and_the_runtime_copies_only_the_built_environment() -> None:
    instructions = _instructions()
    stages = [s["value"].split() for s in instructions if s["instruction"] == "FROM"]
    assert [stage[-1] for stage in stages] == ["build", "runtime"]
    copies = [s["value"] for s in _final_stage() if s["instruction"] == "COPY"]
    assert "--from=build /opt/venv /opt/venv" in copies
    assert not any(" app " in f" {copy} " for copy in copies), "no source tree in the runtime"


def test_dockerfile_installs_dependencies_from_the_hash_locked_file_only() -> None:
    runs = " ".join(s["value"] for s in _instructions() if s["instruction"] == "RUN")
    assert "pip install --require-hashes --no-deps -r requirements.lock" in runs
    assert "--require-hashes --no-deps -r requirements-build.lock" in runs
    # The package itself adds nothing unlocked: no resolution, no isolated backend download.
    for install in re.findall(r"pip (?:install|wheel)[^&]*", runs):
        assert "--no-deps" in install, install
    assert "--no-build-isolation" in runs


def test_dockerfile_runs_as_a_fixed_non_root_user() -> None:
    user = _one(_final_stage(), "USER")
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0, "numeric, so runAsNonRoot can verify it"
    assert user == "10001:10001"


def test_dockerfile_bakes_patterns_where_genai_pattern_dir_points() -> None:
    stage = _final_stage()
    env = _env(stage)
    copies = [s["value"].split() for s in stage if s["instruction"] == "COPY"]
    assert ["patterns", env["GENAI_PATTERN_DIR"]] in copies
    volume = json.loads(_one(stage, "VOLUME"))
    assert volume == [env["GENAI_DATA_DIR"]]
    assert _one(stage, "EXPOSE") == "8000"


def test_dockerfile_starts_genai_serve_and_the_cli_accepts_those_arguments(
    cli_env: Callable[..., None],
) -> None:
    stage = _final_stage()
    entrypoint = json.loads(_one(stage, "ENTRYPOINT"))
    command = json.loads(_one(stage, "CMD"))
    assert entrypoint == ["genai"]
    assert command[:1] == ["serve"] and "--host" in command and "0.0.0.0" in command
    result = run_cli(*command, "--help")  # an unknown option or command would exit non-zero
    assert result.exit_code == 0, result.output
    assert "Start the HTTP service" in result.output


def _healthcheck_argv() -> list[str]:
    value = _one(_final_stage(), "HEALTHCHECK")
    argv = json.loads(value.split("CMD", 1)[1])
    assert isinstance(argv, list)
    return [str(part) for part in argv]


def test_healthcheck_asks_readyz_without_curl() -> None:
    argv = _healthcheck_argv()
    assert argv[:2] == ["python", "-c"]
    assert "http://127.0.0.1:8000/readyz" in argv[2]
    assert not {"curl", "wget"} & set(" ".join(argv).split())


@pytest.fixture
def readyz_server() -> Iterator[Callable[[int], int]]:
    """A loopback server whose /readyz answers the status set through the returned setter."""
    status = {"readyz": 200}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            code = status["readyz"] if self.path == "/readyz" else 404
            self.send_response(code)
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def answer(code: int) -> int:
        status["readyz"] = code
        return int(server.server_address[1])

    yield answer
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(("readyz_status", "healthy"), [(200, True), (503, False)])
def test_healthcheck_command_passes_on_ready_and_fails_on_503(
    readyz_server: Callable[[int], int], readyz_status: int, healthy: bool
) -> None:
    """The HEALTHCHECK's own one-liner, run as Docker would (only the port is the test's)."""
    port = readyz_server(readyz_status)
    _, flag, code = _healthcheck_argv()
    code = code.replace("127.0.0.1:8000", f"127.0.0.1:{port}")
    finished = run_process([sys.executable, flag, code], timeout=30, check=False)
    assert (finished.returncode == 0) is healthy, finished.stderr


def test_dockerignore_keeps_secrets_and_local_state_out_of_the_build_context() -> None:
    ignored = (REPO_ROOT / ".dockerignore").read_text(encoding="utf-8").split()
    for pattern in (".git", ".venv", "**/.env", "data", "tests"):
        assert pattern in ignored


# --- docker compose -----------------------------------------------------------------------


def _compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _compose_schema_validator() -> jsonschema.protocols.Validator:
    schema = json.loads(COMPOSE_SCHEMA.read_text(encoding="utf-8"))
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    validator: jsonschema.protocols.Validator = validator_class(schema)
    return validator


def test_compose_file_conforms_to_the_compose_specification_schema() -> None:
    errors = sorted(_compose_schema_validator().iter_errors(_compose()), key=str)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)


def test_compose_schema_check_rejects_a_misspelt_key() -> None:
    """The schema is strict enough to catch what YAML parsing alone would let through."""
    broken = _compose()
    broken["services"]["gateway"]["restart_policy"] = "always"
    assert list(_compose_schema_validator().iter_errors(broken))


def _docker_compose_available() -> bool:
    if shutil.which("docker") is None:
        return False
    probe = run_process(
        ["docker", "compose", "version"],
        timeout=30,
        check=False,
    )
    return probe.returncode == 0


def _filled_env(path: Path) -> None:
    """deploy/.env.example with every empty value filled in, as a user would."""
    lines = []
    for line in ENV_EXAMPLE.read_text(encoding="utf-8").splitlines():
        if re.fullmatch(r"[A-Z][A-Z0-9_]*=", line):
            line += "value-for-the-test"
        lines.append(line)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_docker_compose_config_accepts_the_file_where_the_cli_exists(tmp_path: Path) -> None:
    """Where `docker compose` is installed it is the authority; the schema test above runs
    everywhere (this machine and CI have the docker CLI without its compose plugin)."""
    if not _docker_compose_available():
        pytest.skip("the docker compose CLI is not installed; the compose-spec schema test ran")
    project = tmp_path / "deploy"
    shutil.copytree(DEPLOY, project)
    _filled_env(project / ".env")
    finished = run_process(
        ["docker", "compose", "-f", str(project / "docker-compose.yml"), "config", "-q"],
        timeout=60,
        check=False,
    )
    assert finished.returncode == 0, finished.stderr


def _interpolations(node: Any) -> Iterator[tuple[str, str]]:
    """Every `${NAME<modifier>}` in the compose file: (name, modifier such as `:?message`)."""
    if isinstance(node, dict):
        for value in node.values():
            yield from _interpolations(value)
    elif isinstance(node, list):
        for value in node:
            yield from _interpolations(value)
    elif isinstance(node, str):
        for match in re.finditer(r"(?<!\$)\$\{([A-Z_][A-Z0-9_]*)([^}]*)\}", node):
            yield match[1], match[2]


def test_compose_requires_every_secret_and_has_no_default_password() -> None:
    compose = _compose()
    used = dict(_interpolations(compose))
    for name in (*SERVICE_KEYS, *STORE_URLS, "POSTGRES_PASSWORD", "REDIS_PASSWORD"):
        assert used.get(name, "").startswith(":?"), f"{name} must be required (${{{name}:?…}})"
    for name, modifier in used.items():
        assert not modifier.startswith((":-", "-")), f"{name} has a default: {modifier}"
    for service in compose["services"].values():
        environment = service.get("environment", {})
        for name, value in environment.items():
            if re.search(r"PASSWORD|SECRET|_KEY$", name):
                assert str(value).startswith("${"), f"{name} is written in the compose file"


def test_compose_services_restart_and_report_health() -> None:
    services = _compose()["services"]
    assert {"gateway", "migrate", "postgres", "redis"} <= set(services)
    for name, service in services.items():
        assert "restart" in service, name
    for name in ("gateway", "postgres", "redis"):
        assert services[name]["healthcheck"]["test"], name
    gateway = services["gateway"]
    assert "/readyz" in " ".join(gateway["healthcheck"]["test"])
    assert gateway["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert services["migrate"]["command"] == ["db", "upgrade"]


def test_env_example_documents_every_variable_compose_needs() -> None:
    documented = re.findall(
        r"^#?\s*([A-Z][A-Z0-9_]*)=", ENV_EXAMPLE.read_text(encoding="utf-8"), re.MULTILINE
    )
    needed = {name for name, _ in _interpolations(_compose())}
    needed |= {*SERVICE_KEYS, *STORE_URLS, *PROVIDER_KEYS, "POSTGRES_PASSWORD"}
    assert needed <= set(documented), needed - set(documented)
    values = dict(
        re.findall(r"^([A-Z][A-Z0-9_]*)=(.*)$", ENV_EXAMPLE.read_text(encoding="utf-8"), re.M)
    )
    assert all(value == "" for value in values.values()), "the example holds no value"


def test_compose_commands_are_real_cli_commands(cli_env: Callable[..., None]) -> None:
    ours = {n: s for n, s in _compose()["services"].items() if s.get("build")}
    assert set(ours) == {"gateway", "migrate"}
    for name, service in ours.items():
        result = run_cli(*service["command"], "--help")
        assert result.exit_code == 0, f"{name}: {result.output}"


# --- the configuration file both deployments mount ---------------------------------------


def test_deploy_genai_yaml_is_a_valid_configuration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no stray .env
    settings = Settings(_env_file=None, config=GENAI_YAML)
    assert settings.cache.scope == "key"
    assert settings.shutdown_grace_seconds < _deployment_pod()["terminationGracePeriodSeconds"]


# --- Kubernetes -----------------------------------------------------------------------------


def _manifests() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(K8S.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if document is not None:
                found.append((path.name, document))
    return found


def _kind(kind: str, name: str | None = None) -> dict[str, Any]:
    matches = [
        doc
        for _, doc in _manifests()
        if doc["kind"] == kind and (name is None or doc["metadata"]["name"] == name)
    ]
    assert len(matches) == 1, f"expected one {kind} {name or ''}, found {len(matches)}"
    return matches[0]


def _deployment_pod() -> dict[str, Any]:
    pod: dict[str, Any] = _kind("Deployment")["spec"]["template"]["spec"]
    return pod


def _gateway_container() -> dict[str, Any]:
    (container,) = _deployment_pod()["containers"]
    assert isinstance(container, dict)
    return container


def test_manifests_hold_every_resource_the_deployment_needs() -> None:
    kinds = sorted(doc["kind"] for _, doc in _manifests())
    assert kinds == [
        "ConfigMap",
        "ConfigMap",
        "Deployment",
        "HorizontalPodAutoscaler",
        "Job",
        "PodDisruptionBudget",
        "Secret",
        "Service",
    ]


def _kubernetes_versions(validator: ModuleType) -> list[str]:
    return [OLDEST_KUBERNETES, str(validator.latest_version())]


@pytest.mark.parametrize("kubernetes", ["oldest", "latest"])
def test_every_manifest_validates_against_the_kubernetes_schemas(kubernetes: str) -> None:
    validator = require("kubernetes_validate", install="kubernetes-validate")
    version = _kubernetes_versions(validator)[0 if kubernetes == "oldest" else 1]
    for filename, document in _manifests():
        try:
            validator.validate(document, version, strict=True)
        except validator.ValidationError as exc:
            pytest.fail(f"{filename} {document['kind']}: {exc.message} at {list(exc.path)}")


def test_kubernetes_validation_rejects_a_misspelt_field() -> None:
    """Strict validation is the real schema check, not YAML parsing: a typo fails it."""
    validator = require("kubernetes_validate", install="kubernetes-validate")
    deployment = _kind("Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(validator.ValidationError):
        validator.validate(deployment, OLDEST_KUBERNETES, strict=True)


def test_deployment_probes_readiness_and_liveness_on_the_served_port() -> None:
    container = _gateway_container()
    port_names = {port["name"] for port in container["ports"]}
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["port"] in port_names
    assert {"cpu", "memory"} <= set(container["resources"]["requests"])
    assert "memory" in container["resources"]["limits"]


def test_deployment_runs_non_root_on_a_read_only_root_filesystem() -> None:
    pod = _deployment_pod()
    container = _gateway_container()
    image_user = _one(_final_stage(), "USER")
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert f"{pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}" == (
        image_user
    )
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    # The writable places the service uses are emptyDir volumes: /tmp and the data directory.
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
    data_dir = _env(_final_stage())["GENAI_DATA_DIR"]
    for path in ("/tmp", data_dir):
        assert "emptyDir" in volumes[mounts[path]], path


def test_deployment_reads_config_and_patterns_from_the_configmaps() -> None:
    container = _gateway_container()
    pod = _deployment_pod()
    env = {item["name"]: item["value"] for item in container["env"]}
    mounts = {mount["name"]: mount["mountPath"] for mount in container["volumeMounts"]}
    configmaps = {
        volume["configMap"]["name"]: volume["name"]
        for volume in pod["volumes"]
        if "configMap" in volume
    }
    config_dir = mounts[configmaps["genai-config"]]
    assert env["GENAI_CONFIG"] == f"{config_dir}/genai.yaml"
    roots = env["GENAI_PATTERN_DIR"].split(":")
    assert roots == [
        mounts[configmaps["genai-patterns"]],
        _env(_final_stage())["GENAI_PATTERN_DIR"],
    ]
    assert env["GENAI_DATABASE_AUTO_MIGRATE"] == "false", "the Job migrates, never a replica"
    assert container["envFrom"] == [{"secretRef": {"name": "genai-secrets"}}]


def test_configmap_config_is_the_compose_one_and_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _kind("ConfigMap", "genai-config")["data"]["genai.yaml"]
    assert text == GENAI_YAML.read_text(encoding="utf-8"), "k8s and compose share one config"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "genai.yaml").write_text(text, encoding="utf-8")
    assert Settings(_env_file=None, config=tmp_path / "genai.yaml").default_model


def test_configmap_patterns_load_in_front_of_the_baked_in_ones(tmp_path: Path) -> None:
    patterns = _kind("ConfigMap", "genai-patterns")["data"]
    assert patterns
    for filename, text in patterns.items():
        (tmp_path / filename).write_text(text, encoding="utf-8")
    catalog = PatternCatalog(roots=[tmp_path, SHIPPED_PATTERNS])
    assert catalog.check() == {}
    for filename in patterns:
        assert filename.removesuffix(".md") in catalog.names()


def test_configmap_volume_layout_yields_each_pattern_once(tmp_path: Path) -> None:
    """A mounted ConfigMap is not flat: the kubelet writes the files into a hidden timestamped
    directory, links `..data` to it, and links each key to `..data/<key>`."""
    patterns = _kind("ConfigMap", "genai-patterns")["data"]
    version = tmp_path / "..2026_01_01_00_00_00.000000001"
    version.mkdir()
    (tmp_path / "..data").symlink_to(version.name)
    for filename, text in patterns.items():
        (version / filename).write_text(text, encoding="utf-8")
        (tmp_path / filename).symlink_to(f"..data/{filename}")
    catalog = PatternCatalog(roots=[tmp_path])
    assert catalog.names() == sorted(name.removesuffix(".md") for name in patterns)


def _pod_environment(root: Path) -> dict[str, str]:
    """The gateway container's files and environment, rebuilt under `root`: each ConfigMap
    written where its volume is mounted, the image's baked pattern root being the repository's,
    and every mount path in the environment moved under `root`."""
    container = _gateway_container()
    volumes = {volume["name"]: volume for volume in _deployment_pod()["volumes"]}
    image_patterns = _env(_final_stage())["GENAI_PATTERN_DIR"]
    moved = {image_patterns: str(SHIPPED_PATTERNS)}
    for mount in container["volumeMounts"]:
        target = root / mount["mountPath"].lstrip("/")
        target.mkdir(parents=True)
        moved[mount["mountPath"]] = str(target)
        if configmap := volumes[mount["name"]].get("configMap"):
            for filename, text in _kind("ConfigMap", configmap["name"])["data"].items():
                (target / filename).write_text(text, encoding="utf-8")

    def relocate(path: str) -> str:
        for original in sorted(moved, key=len, reverse=True):  # the deepest mount owns a path
            if path == original or path.startswith(original + "/"):
                return moved[original] + path[len(original) :]
        return path

    environment = {
        item["name"]: ":".join(relocate(part) for part in item["value"].split(":"))
        for item in container["env"]
    }
    environment["GENAI_DATA_DIR"] = moved[_env(_final_stage())["GENAI_DATA_DIR"]]
    return environment


async def test_a_replica_configured_like_the_deployment_serves_after_the_migration_job(
    database_url: str,
    fake: FakeProviderServer,
    tmp_path: Path,
    cli_env: Callable[..., None],
) -> None:
    """The Job's `genai db upgrade`, then a replica with the Deployment's environment, mounts
    and Secret keys: ready, and completing the ConfigMap's own pattern."""
    secret = {name: new_key_text() for name in SERVICE_KEYS}
    cli_env(
        **_pod_environment(tmp_path / "pod"),
        **secret,
        GENAI_DATABASE_URL=database_url,
        OPENAI_API_KEY=OPENAI_KEY,
        OPENAI_BASE_URL=f"{fake.base_url}/v1",
    )
    job_args = _kind("Job")["spec"]["template"]["spec"]["containers"][0]["args"]
    migrated = await asyncio.to_thread(run_cli, *job_args)  # the CLI runs its own event loop
    assert migrated.exit_code == 0, migrated.output
    settings = get_settings()
    assert settings.auto_migrate is False
    async with serve_app(settings) as http:
        ready = await http.get("/readyz")
        assert ready.status_code == 200, ready.text
        pattern = next(iter(_kind("ConfigMap", "genai-patterns")["data"])).removesuffix(".md")
        completed = await http.post(
            "/v1/completions", json={"pattern_key": pattern, "user_prompt": "Fixed a crash."}
        )
        assert completed.status_code == 200, completed.text
        provenance = completed.json()["provenance"]
        assert provenance["pattern_name"] == pattern
        assert provenance["pattern_base_path"] == str(settings.pattern_dir[0]), "the ConfigMap's"
        assert (provenance["provider"], provenance["model"]) == ("openai", "gpt-4o-mini")


def test_secret_names_every_key_and_holds_only_placeholders() -> None:
    secret = _kind("Secret")
    values: dict[str, str] = secret["stringData"]
    assert {*SERVICE_KEYS, *STORE_URLS, *PROVIDER_KEYS} <= set(values)
    assert all(value.startswith("REPLACE_ME") for value in values.values())
    # A placeholder left in place stops the service at start-up instead of running keyless.
    for name in SERVICE_KEYS:
        with pytest.raises(ConfigurationError):
            decode_key(values[name], what=name)


def test_service_hpa_and_pdb_select_the_deployment_pods() -> None:
    deployment = _kind("Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    service = _kind("Service")
    assert service["spec"]["selector"].items() <= labels.items()
    port_names = {port["name"] for port in _gateway_container()["ports"]}
    assert {port["targetPort"] for port in service["spec"]["ports"]} <= port_names
    pdb = _kind("PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    hpa = _kind("HorizontalPodAutoscaler")
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    assert hpa["spec"]["minReplicas"] > pdb["spec"]["minAvailable"], "a drain can proceed"
    assert "replicas" not in deployment["spec"], "the HPA owns the replica count"


def test_migration_job_runs_genai_db_upgrade_with_the_same_image_and_secret(
    cli_env: Callable[..., None],
) -> None:
    job_pod = _kind("Job")["spec"]["template"]["spec"]
    (migrate,) = job_pod["containers"]
    assert migrate["args"] == ["db", "upgrade"]
    assert migrate["image"] == _gateway_container()["image"]
    assert migrate["envFrom"] == _gateway_container()["envFrom"]
    assert job_pod["restartPolicy"] == "Never"
    assert migrate["securityContext"]["readOnlyRootFilesystem"] is True
    for args in (migrate["args"], _gateway_container()["args"]):
        result = run_cli(*args, "--help")
        assert result.exit_code == 0, result.output
