"""The Java that Spark's JVMs run: found once by the rules Spark's launcher uses, checked for its version."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from core.errors import MissingDependencyError

MIN_JAVA = 17
INSTALL_HINT = "install a JDK 17 or newer (Debian: apt-get install openjdk-17-jre-headless) or set JAVA_HOME"


def java_binary() -> Path | None:
    """The `java` Spark's launcher starts: $JAVA_HOME/bin first, then the PATH."""
    java = shutil.which(
        "java",
        path=os.path.join(os.environ.get("JAVA_HOME", ""), "bin") + os.pathsep + os.environ.get("PATH", ""),
    )
    return Path(java) if java else None


def check_java() -> str:
    """Return the Java major version, or fail with a message that says how to install Java."""
    java = java_binary()
    if java is None:
        raise MissingDependencyError("Java was not found; Spark needs it", hint=INSTALL_HINT)
    out = subprocess.run([str(java), "-version"], capture_output=True, text=True, check=False).stderr
    m = re.search(r'version "(\d+)', out)
    if not m or int(m.group(1)) < MIN_JAVA:
        found = out.splitlines()[:1]
        raise MissingDependencyError(f"Spark needs Java {MIN_JAVA}+, found: {found}", hint=INSTALL_HINT)
    return m.group(1)
