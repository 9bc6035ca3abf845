"""footprint: which of the compiler's mappings may lose their page table entries."""

from __future__ import annotations

from xdp_bfd.core import footprint


def _vma(start: int, perms: str, inode: int, path: str, *, rss: int, anon: int) -> str:
    head = f"{start:x}-{start + 0x1000:x} {perms} 00000000 08:01 {inode}" + (f"    {path}" if path else "")
    return (
        f"{head}\n"
        f"Size:                  4 kB\nRss:            {rss:8d} kB\nPss:                   4 kB\n"
        f"Anonymous:      {anon:8d} kB\nVmFlags: rd mr mw me\n"
    )


SMAPS = "".join(
    [
        _vma(0x10000, "r-xp", 7, "/usr/lib/x86_64-linux-gnu/libLLVM-14.so.1", rss=4000, anon=0),  # text: yes
        _vma(0x20000, "r--p", 7, "/usr/lib/x86_64-linux-gnu/libLLVM-14.so.1", rss=900, anon=0),  # rodata: yes
        _vma(
            0x30000, "r--p", 7, "/usr/lib/x86_64-linux-gnu/libLLVM-14.so.1", rss=700, anon=12
        ),  # RELRO, written: no
        _vma(0x40000, "rw-p", 7, "/usr/lib/x86_64-linux-gnu/libLLVM-14.so.1", rss=300, anon=300),  # data: no
        _vma(0x50000, "r-xp", 9, "/usr/lib/llvm-14/lib/libclang-cpp.so.14", rss=2000, anon=0),  # yes
        _vma(
            0x60000, "r-xp", 9, "/usr/lib/llvm-14/lib/libclang-cpp.so.14", rss=0, anon=0
        ),  # nothing resident
        _vma(0x70000, "r-xp", 11, "/usr/lib/x86_64-linux-gnu/libc.so.6", rss=1500, anon=0),  # the loop's: no
        _vma(0x80000, "r-xp", 13, "/usr/bin/python3.11", rss=5000, anon=0),  # the loop's: no
        _vma(0x90000, "rw-p", 0, "[heap]", rss=9000, anon=9000),  # no
        _vma(0xA0000, "r--p", 0, "", rss=64, anon=0),  # anonymous read-only: no file behind it
    ]
)


def test_only_unwritten_read_only_compiler_mappings_qualify():
    got = footprint.compiler_ranges(SMAPS)
    assert got == [(0x10000, 0x11000, 4000), (0x20000, 0x21000, 900), (0x50000, 0x51000, 2000)]


def test_nothing_to_shed_without_a_compiler_loaded():
    # The unit-test process has not imported bcc: no LLVM mapped, nothing dropped.
    assert footprint.shed_compiler_pages() == 0
