"""The env server against the OpenAPI schema it publishes (schemathesis): every operation, with generated
bodies and path parameters, answers a documented status with a body that matches the documented schema and
never a server error; and a stateful run follows the links from POST /sessions through real sessions."""
import pytest

schemathesis = pytest.importorskip("schemathesis", reason="the conformance test needs schemathesis (test extra)")

from hypothesis import HealthCheck, settings  # noqa: E402

pytestmark = pytest.mark.slow   # about a minute: 10 operations x 25 generated cases x 2 envs, and a stateful run

from agentgym.envs.remote.server import EnvServer  # noqa: E402
from agentgym.envs.remote.service import EnvService, ServiceConfig  # noqa: E402

ENV_IDS = ("agentgym/Toy-KeyDoor-v0", "agentgym/Household-v0")


@pytest.fixture(scope="module", params=ENV_IDS)
def api_schema(request):
    server = EnvServer(EnvService(request.param, config=ServiceConfig(max_sessions=4096))).start()
    try:
        yield schemathesis.openapi.from_url(f"{server.url}/openapi.json")
    finally:
        server.close()


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=25, suppress_health_check=list(HealthCheck))
def test_every_operation_conforms(case):
    case.call_and_validate()


def test_stateful_sessions_conform(api_schema):
    machine = api_schema.as_state_machine()
    machine.run(settings=settings(max_examples=15, stateful_step_count=8, suppress_health_check=list(HealthCheck)))
