"""Older source trees of this project, unpacked by `git archive`, to run a broker as it was.

A test that shows what a change fixes runs the same script on the tree before it
(`BrokerProcess(..., source=source_tree(tmp_path, PRE_EPOCHS))`); without git or the commit
(an exported tarball) it is skipped.
"""

from __future__ import annotations

import subprocess
import tarfile
from io import BytesIO
from pathlib import Path

import pytest

from tests.support.tools import ROOT

# main before leader epochs (issue 16): followers truncate to their high watermark on becoming followers.
PRE_EPOCHS = "fe0b709"


def source_tree(workdir: Path, commit: str) -> Path:
    """`git archive <commit>` of this repository, unpacked under `workdir`."""
    try:
        tar = subprocess.run(["git", "-C", str(ROOT), "archive", commit], check=True, capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"git archive {commit} unavailable: {e}")
    out = workdir / f"src-{commit}"
    with tarfile.open(fileobj=BytesIO(tar)) as t:
        t.extractall(out, filter="data")
    return out
