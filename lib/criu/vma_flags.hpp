// The VMA flags CRIU 4.1 takes from /proc/PID/smaps's VmFlags line, and the
// check that a dump's mm image still matches the frozen task.
//
// With --smaps-before-freeze (criu-patches/0005) CRIU reads VmFlags before
// the freeze, so a madvise() or mlock() on a whole VMA just before it is not
// in the images. The tasks stay frozen until the lazy dump ends, so the
// source reads smaps again once they are frozen and compares before letting
// the destination resume.
#pragma once

#include "criu/criu_image.hpp"

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::criu {

// What CRIU derives from one VMA's VmFlags (proc_parse.c __parse_vmflags):
// mmap flags (MAP_GROWSDOWN, MAP_LOCKED, MAP_NORESERVE) and the madvise
// bitmap (1 << MADV_x for SEQUENTIAL, RANDOM, DONTFORK, DONTDUMP,
// MERGEABLE, HUGEPAGE, NOHUGEPAGE).
struct vma_flags {
    uint32_t map_flags = 0;
    uint64_t madv = 0;
    bool operator==(const vma_flags&) const = default;
};

// The mmap flags the comparison covers: the ones CRIU takes from VmFlags
// alone (MAP_HUGETLB it also infers from the backing device).
inline constexpr uint32_t vmflags_map_bits = 0x0100 | 0x2000 | 0x4000; // GROWSDOWN|LOCKED|NORESERVE

// The flags a VmFlags value ("rd wr mr mw me ac sd") stands for.
[[nodiscard]] vma_flags parse_vmflags(std::string_view line);

// One VMA of smaps: where it ends (a unique key: CRIU may add a guard page
// below a stack's start) and its flags.
struct smaps_vma {
    uint64_t start = 0, end = 0;
    vma_flags flags;
};

// Parses smaps text: VMAs in address order. Throws on malformed text.
[[nodiscard]] std::vector<smaps_vma> parse_smaps(std::string_view text);
// Reads and parses /proc/PID/smaps. Throws if it cannot be read.
[[nodiscard]] std::vector<smaps_vma> read_smaps(pid_t pid);

// Empty if every dumped VMA's flags equal those smaps has for the VMA that
// ends at the same address; else what differs, for an error message.
[[nodiscard]] std::string compare_vma_flags(const std::vector<vma>& dumped,
                                            const std::vector<smaps_vma>& now);

} // namespace ferry::criu
