"""assets/amx_ldtilecfg.h, which the README has users force-include into llama.cpp's build on Intel CPUs with AMX,
must make the compiler keep the whole tile configuration that ldtilecfg reads. Compiled, not run: no AMX needed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

HEADER = Path(__file__).resolve().parents[1] / "assets" / "amx_ldtilecfg.h"

# ggml's ggml_tile_config_init in miniature, the rows read through a pointer so that a kept store shows as a read of
# (%rdi) (the first argument) in the assembly: GCC 12's intrinsic lets -O3 drop every store but the palette's.
SOURCE = r"""
#include <immintrin.h>
struct cfg { unsigned char palette, start_row, reserved[14]; unsigned short colsb[16]; unsigned char rows[16]; };
void load(const unsigned char *rows) {
    struct cfg tc __attribute__((aligned(64))) = {0};
    tc.palette = 1;
    for (int i = 0; i < 8; i++) { tc.rows[i] = rows[i]; tc.colsb[i] = 64; }
    _tile_loadconfig(&tc);
}
"""


def _assembly(compiler: str, language: str, flags: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    source = tmp_path / f"tile.{language}"
    source.write_text(SOURCE)
    return subprocess.run([compiler, "-O3", *flags, "-S", "-o", "-", str(source)], capture_output=True, text=True)


@pytest.mark.parametrize("compiler,language", [("gcc", "c"), ("g++", "cpp")])
def test_the_header_keeps_the_tile_configuration(compiler, language, tmp_path):
    if shutil.which(compiler) is None:
        pytest.skip(f"{compiler} is not installed")
    if _assembly(compiler, language, ["-mamx-tile"], tmp_path).returncode != 0:
        pytest.skip(f"{compiler} has no -mamx-tile (AMX intrinsics came with GCC 11)")
    built = _assembly(compiler, language, ["-mamx-tile", "-include", str(HEADER)], tmp_path)
    assert built.returncode == 0, built.stderr[-2000:]
    body = built.stdout
    assert "ldtilecfg" in body
    assert "(%rdi)" in body, "the rows' stores were dropped before ldtilecfg:\n" + body
