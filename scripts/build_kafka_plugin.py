"""Build the Kafka broker plugin (plugins/kafka/): the RemoteLogMetadataManager that forwards to rlmm over gRPC.

    python scripts/build_kafka_plugin.py [--kafka-libs DIR] [--tests]

Generates Java from ``proto/`` and ``plugins/kafka/src/main/proto/`` (protoc + grpc_java_plugin), compiles it
with the plugin's sources (``javac --release 17``) against Kafka's ``libs/`` (``--kafka-libs``, else
``KAFKA_LIBS``, else ``../shared/kafka-4.3.1/libs`` beside the repository) and Debian's jars, and writes
``build/rlmm-kafka-plugin-VERSION/``: the plugin's jar and the runtime jars a broker does not ship, as real
files (no Kafka jar, no slf4j jar: the broker's loader gives those). A broker loads it with
``remote.log.metadata.manager.class.path=.../rlmm-kafka-plugin-VERSION/*``.

``--tests`` also compiles ``plugins/kafka/src/test/java`` (when present) into ``build/kafka-plugin-tests/classes``
against Kafka's libs, the plugin's jar and slf4j. Prints one JSON line: ``plugin_dir``, ``jars``, ``tests_classes``.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = ROOT / "plugins" / "kafka"
BUILD = ROOT / "build"
DEBIAN_JARS = Path("/usr/share/java")
GRPC_JAVA_PLUGIN = Path("/usr/bin/grpc_java_plugin")

# The jars the plugin runs with, found by loading it through Kafka's ChildFirstClassLoader over a parent that
# has only Kafka's libs and slf4j, and calling every method (plaintext, mutual TLS, through an HTTP CONNECT
# proxy): (jar in /usr/share/java, Debian package). netty-handler-proxy is needed only where a proxy applies
# (https.proxyHost, GRPC_PROXY_EXP); the epoll jars only so that grpc-netty's probe for epoll finds these
# classes (not available here: NIO) rather than a broker's own netty epoll, which fails grpc-netty's set-up.
RUNTIME_JARS = (
    ("grpc-api.jar", "libgrpc-java"),
    ("grpc-context.jar", "libgrpc-java"),
    ("grpc-core.jar", "libgrpc-java"),
    ("grpc-netty.jar", "libgrpc-java"),
    ("grpc-protobuf.jar", "libgrpc-java"),
    ("grpc-protobuf-lite.jar", "libgrpc-java"),
    ("grpc-stub.jar", "libgrpc-java"),
    ("protobuf.jar", "libprotobuf-java"),
    ("guava.jar", "libguava-java"),
    ("perfmark-api.jar", "libperfmark-java"),
    ("netty-buffer.jar", "libnetty-java"),
    ("netty-codec.jar", "libnetty-java"),
    ("netty-codec-http.jar", "libnetty-java"),
    ("netty-codec-http2.jar", "libnetty-java"),
    ("netty-common.jar", "libnetty-java"),
    ("netty-handler.jar", "libnetty-java"),
    ("netty-handler-proxy.jar", "libnetty-java"),
    ("netty-resolver.jar", "libnetty-java"),
    ("netty-transport.jar", "libnetty-java"),
    ("netty-transport-native-epoll.jar", "libnetty-java"),
    ("netty-transport-native-unix-common.jar", "libnetty-java"),
)
SLF4J = ("slf4j-api.jar", "libslf4j-java")  # compile only: the broker ships it
ERROR_PRONE = ("error-prone-annotations.jar", "liberror-prone-java")  # compile only: annotations of grpc's classes
TOOLS = (("protoc", "protobuf-compiler"), ("javac", "default-jdk-headless"), ("jar", "default-jdk-headless"))


class BuildError(Exception):
    """A one-line reason the build cannot go on."""


def version() -> str:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["version"]


def kafka_libs(given: str | None) -> Path:
    chosen = given or os.environ.get("KAFKA_LIBS")
    if not chosen:
        default = ROOT.parent / "shared" / "kafka-4.3.1" / "libs"
        if not default.is_dir():
            raise BuildError(
                "Kafka's libs/ not found: pass --kafka-libs DIR or set KAFKA_LIBS (the libs/ of Kafka 4.3.1)"
            )
        chosen = str(default)
    libs = Path(chosen).resolve()
    if not (any(libs.glob("kafka-storage-api-*.jar")) and any(libs.glob("kafka-clients-*.jar"))):
        raise BuildError(f"{libs} is not Kafka's libs/ folder (no kafka-storage-api-*.jar and kafka-clients-*.jar)")
    return libs


def debian_jar(name: str, package: str) -> Path:
    jar = DEBIAN_JARS / name
    if not jar.exists():
        raise BuildError(f"{jar} is missing: install the Debian package {package}")
    return jar.resolve()


def versioned_name(jar: Path) -> str:
    """The longest name under which Debian installs the jar, the one with its version (guava-31.1-jre.jar)."""
    return max((p.name for p in DEBIAN_JARS.glob("*.jar") if p.resolve() == jar), key=len)


def check_tools() -> None:
    for tool, package in TOOLS:
        if shutil.which(tool) is None:
            raise BuildError(f"{tool} is missing: install the Debian package {package}")
    if not GRPC_JAVA_PLUGIN.exists():
        raise BuildError(
            f"{GRPC_JAVA_PLUGIN} is missing: install the Debian package protobuf-compiler-grpc-java-plugin"
        )
    javac = subprocess.run(["javac", "-version"], capture_output=True, text=True).stdout
    found = re.search(r"javac (\d+)", javac)
    if not found or int(found.group(1)) < 17:
        raise BuildError(
            f"javac 17 or newer is needed, found {javac.strip()!r}: install the Debian package default-jdk-headless"
        )


def run(args: list[str | Path]) -> None:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if done.stderr.strip():
        print(done.stderr.rstrip(), file=sys.stderr)
    if done.returncode != 0:
        raise BuildError(f"{Path(str(args[0])).name} failed (exit {done.returncode})")


def generate(out: Path) -> list[Path]:
    """Java sources of rlmm's protos and of the plugin's own (the status details)."""
    own = PLUGIN / "src" / "main" / "proto"
    protos = sorted((ROOT / "proto").rglob("*.proto")) + sorted(own.rglob("*.proto"))
    out.mkdir(parents=True)
    run(
        [
            "protoc",
            f"-I{ROOT / 'proto'}",
            f"-I{own}",
            f"--plugin=protoc-gen-grpc-java={GRPC_JAVA_PLUGIN}",
            f"--java_out={out}",
            f"--grpc-java_out={out}",
            *protos,
        ]
    )
    sources = sorted(out.rglob("*.java"))
    # grpc_java_plugin 1.41 marks stubs @javax.annotation.Generated, which JDK 11 dropped; it is source-only
    generated = re.compile(r"^@javax\.annotation\.Generated\(.*?\)\n", re.MULTILINE | re.DOTALL)
    for source in sources:
        text = source.read_text()
        if "@javax.annotation.Generated" in text:
            source.write_text(generated.sub("", text, count=1))
    return sources


def javac(sources: list[Path], classpath: list[Path], out: Path, lint: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    options = ["-Xlint:all", "-Xlint:-processing"] if lint else ["-nowarn"]
    run(
        [
            "javac",
            "--release",
            "17",
            "-encoding",
            "UTF-8",
            *options,
            "-d",
            out,
            "-cp",
            os.pathsep.join(map(str, classpath)),
            *sources,
        ]
    )


def build(libs: Path, tests: bool) -> dict[str, object]:
    check_tools()
    runtime = [debian_jar(name, package) for name, package in RUNTIME_JARS]
    slf4j = debian_jar(*SLF4J)
    error_prone = debian_jar(*ERROR_PRONE)
    kafka = sorted(libs.glob("*.jar"))
    work = BUILD / "kafka-plugin"
    shutil.rmtree(work, ignore_errors=True)
    classes = work / "classes"

    generated = generate(work / "generated")
    javac(generated, runtime, classes, lint=False)
    javac(
        sorted((PLUGIN / "src" / "main" / "java").rglob("*.java")),
        [classes, *runtime, error_prone, slf4j, *kafka],
        classes,
        lint=True,
    )

    name = f"rlmm-kafka-plugin-{version()}"
    plugin_dir = BUILD / name
    shutil.rmtree(plugin_dir, ignore_errors=True)
    plugin_dir.mkdir(parents=True)
    plugin_jar = plugin_dir / f"{name}.jar"
    run(["jar", "--create", "--file", plugin_jar, "-C", classes, "."])
    for jar in runtime:
        shutil.copyfile(jar, plugin_dir / versioned_name(jar))

    tests_classes = None
    test_sources = sorted((PLUGIN / "src" / "test" / "java").rglob("*.java"))
    if tests and test_sources:
        tests_classes = BUILD / "kafka-plugin-tests" / "classes"
        shutil.rmtree(tests_classes, ignore_errors=True)
        javac(test_sources, [*kafka, plugin_jar, slf4j], tests_classes, lint=True)
    return {
        "plugin_dir": str(plugin_dir),
        "jars": sorted(p.name for p in plugin_dir.iterdir()),
        "tests_classes": None if tests_classes is None else str(tests_classes),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--kafka-libs", help="Kafka's libs/ folder (default: KAFKA_LIBS, else ../shared/kafka-4.3.1/libs)"
    )
    parser.add_argument("--tests", action="store_true", help="also compile plugins/kafka/src/test/java")
    args = parser.parse_args()
    try:
        libs = kafka_libs(args.kafka_libs)
        BUILD.mkdir(exist_ok=True)
        with open(BUILD / ".kafka-plugin.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time: each starts by clearing the folders
            result = build(libs, args.tests)
        print(json.dumps(result))
    except BuildError as e:
        print(f"build_kafka_plugin: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
