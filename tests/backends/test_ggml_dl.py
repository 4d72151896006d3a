"""Runtime CPU dispatch builds: finding the variant files, telling which one is in use."""

from __future__ import annotations

from pathlib import Path

import pytest

from puppeteer.backends.llamacpp.ggml_dl import CpuBackend, ensure_cpu_backend, mapped_variant, variant_files


def test_variant_files_are_found_by_name_and_the_first_folder_wins(tmp_path: Path) -> None:
    lib, bin_ = tmp_path / "lib", tmp_path / "bin"
    for d, names in (
        (lib, ["libggml-cpu-haswell.so"]),
        (
            bin_,
            ["libggml-cpu-haswell.so", "libggml-cpu-icelake.so", "libggml-base.so", "libggml-cpu-x64.so.0"],
        ),
    ):
        d.mkdir()
        for n in names:
            (d / n).write_bytes(b"")
    found = variant_files([lib, bin_, tmp_path / "missing"])
    assert found == {"haswell": lib / "libggml-cpu-haswell.so", "icelake": bin_ / "libggml-cpu-icelake.so"}


def test_the_mapped_variant_is_read_from_the_process_maps(tmp_path: Path) -> None:
    maps = tmp_path / "maps"
    maps.write_text(
        "7f00-7f01 r-xp 00000000 00:2a 12 /venv/site-packages/llama_cpp/lib/libggml-base.so.0.9\n"
        "7f02-7f03 r-xp 00000000 00:2a 13 /venv/site-packages/bin/libggml-cpu-icelake.so\n"
        "7f04-7f05 r--p 00001000 00:2a 13 /venv/site-packages/bin/libggml-cpu-icelake.so\n"
    )
    assert mapped_variant(maps) == "icelake"
    assert mapped_variant(tmp_path / "absent") == ""
    assert "icelake" in CpuBackend(True, "icelake", ("haswell", "icelake")).describe()


def test_a_build_with_the_cpu_backend_linked_in_is_left_alone() -> None:
    pytest.importorskip("llama_cpp")
    from puppeteer.backends.llamacpp.ggml_dl import variant_dirs

    if variant_files(variant_dirs()):
        pytest.skip("this environment has a runtime-dispatch build")
    cpu = ensure_cpu_backend()
    assert not cpu.dynamic and cpu.variant == "" and "linked in" in cpu.describe()
