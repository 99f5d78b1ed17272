# SPDX-License-Identifier: Apache-2.0
"""The license: LICENSE at the root is the Apache License 2.0 (upstream
Maru's, so that code can move between them), and every source file of the
repository says so in an SPDX line near its top.  Data (corpora, results,
pictures, the trace and its own license) and documents are not source."""
import os
import re
import shutil
import subprocess

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
NOT_SOURCE = re.compile(
    r"^(tests/fuzz/corpus/|tests/fuzz/crashes/|docs/img/|bench/results/)"
    r"|\.(md|png|svg|xz|json|h2m|csv)$|(^|/)LICENSE[^/]*$"
    r"|^cmake/debian/copyright$")  # (the license's own text)
SPDX = "SPDX-License-Identifier: Apache-2.0"


def test_license_file():
    text = open(os.path.join(REPO, "LICENSE")).read()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_every_source_file_has_an_spdx_line():
    if not shutil.which("git") or \
            not os.path.exists(os.path.join(REPO, ".git")):
        pytest.skip("not a git checkout")
    files = subprocess.run(["git", "ls-files"], cwd=REPO, check=True,
                           capture_output=True, text=True).stdout.split("\n")
    missing = []
    for f in filter(None, files):
        if NOT_SOURCE.search(f) and not f.endswith("CMakeLists.txt"):
            continue
        with open(os.path.join(REPO, f), "rb") as fh:
            head = fh.read(400).decode("utf-8", "replace").splitlines()[:3]
        if not any(SPDX in line for line in head):
            missing.append(f)
    assert not missing, f"no '{SPDX}' in the first lines of: {missing}"
