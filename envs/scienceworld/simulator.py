"""One ScienceWorld JVM, owned by one env and closed with it.

The simulator is the Scala jar that the `scienceworld` wheel ships, started through py4j the way the
package does it, with JVM options of our own (`JVM_OPTIONS`: a 512 MB heap cap and the serial
collector halve the resident memory, 530 -> 240 MB, at the same step speed; one identity hash code makes
a variation load the same way in every JVM). `die_on_exit=True` makes
the JVM read its stdin and exit when that pipe closes, which happens however the Python process ends
(SIGKILL included), so no java process outlives its parent; `close()` also waits for the JVM and kills
it if it lingers. A py4j error on a call means the JVM died or the simulator threw: the env ends that
episode as a failure and the next reset starts a fresh JVM when the old one is gone.
"""
from __future__ import annotations

import shutil
import subprocess
from typing import Any

from agentgym.errors import MissingDependencyError, require

# -XX:hashCode=2: every identity hash code is 1. The simulator lists a room's objects, and names them in
# its valid actions, by iterating hash sets keyed by identity hashes, which differ from one JVM (or one
# load) to the next: the same variation then gave different observations and actions ("a wood cup
# (containing yellow paint)" first in one env, last in another), so a GRPO group was not one task. With one
# hash code the order is the insertion order, the same everywhere (measured: no change in steps/s).
JVM_OPTIONS = ("-Xmx512m", "-XX:+UseSerialGC", "-XX:+UnlockExperimentalVMOptions", "-XX:hashCode=2")
JAVA_HINT = ("ScienceWorld runs its simulator on a Java runtime (Java 8 or newer) and no `java` is on PATH: "
             "install one (Debian/Ubuntu: apt-get install default-jre-headless; macOS: brew install openjdk) "
             "or put its bin/ folder on PATH")


def simulator_errors() -> tuple[type[BaseException], ...]:
    """The exceptions a dead or failing JVM raises through py4j (and the sockets under it)."""
    from py4j.protocol import Py4JError

    return (Py4JError, ConnectionError, OSError, EOFError)


class Simulator:
    """A started ScienceWorld JVM; `server` is its Java `PythonInterface` (load, reset, step, score...)."""

    def __init__(self, jvm_options: tuple[str, ...] = JVM_OPTIONS) -> None:
        require("scienceworld", "scienceworld")
        from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway
        from scienceworld.constants import BASEPATH, JAR_PATH

        if shutil.which("java") is None:
            raise MissingDependencyError(JAVA_HINT)
        port, self.process = launch_gateway(classpath=JAR_PATH, die_on_exit=True, cwd=BASEPATH, return_proc=True,
                                            javaopts=list(jvm_options))
        self._gateway = JavaGateway(gateway_parameters=GatewayParameters(auto_field=True, port=port),
                                    java_process=self.process)
        self.server: Any = self._gateway.jvm.scienceworld.runtime.pythonapi.PythonInterface()

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        """Shut the gateway down and make sure the JVM is gone (killed after 5 s)."""
        try:
            self._gateway.shutdown()
        except Exception:  # a half-dead gateway may fail to shut down; the process is handled below
            pass
        if self.alive():
            try:  # die_on_exit: a line (or EOF) on stdin ends the JVM
                self.process.stdin.write(b"\n")
                self.process.stdin.flush()
                self.process.stdin.close()
            except OSError:
                pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)
