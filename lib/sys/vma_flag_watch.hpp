// Watches a process tree for the system calls that change a VMA's flags
// while leaving its /proc/PID/maps line as it was: madvise with an advice
// that sets a flag (MADV_NORMAL, RANDOM, SEQUENTIAL, DONTFORK, DOFORK,
// MERGEABLE, UNMERGEABLE, HUGEPAGE, NOHUGEPAGE, DONTDUMP, DODUMP,
// WIPEONFORK, KEEPONFORK), the mlock family, and prctl(PR_SET_MEMORY_MERGE).
//
// CRIU with --smaps-before-freeze (criu-patches/0005) takes VmFlags from
// smaps read before the freeze and only the maps lines after it. If no
// thread made such a call from before that read until the freeze, and no
// thread appeared meanwhile, the flags it dumped are the frozen tree's;
// otherwise smaps must be read again from the frozen tree, which walks every
// page table (about 8 ms per GiB here). One perf tracepoint counter per
// thread and kind of call, filtered in the kernel: nothing runs in the tree.
#pragma once

#include "core/unique_fd.hpp"

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ferry::proc {

// The tracepoints' ids, read from tracefs (mounted in a private mount
// namespace of a helper if the host has not mounted it). Probed once per
// process; nullopt with the reason logged if this kernel or host has none.
struct watch_tracepoints {
    uint64_t madvise = 0, prctl = 0, raw_syscall = 0;
};
[[nodiscard]] std::optional<watch_tracepoints> probe_watch_tracepoints(std::string& why_not);

class vma_flag_watch {
  public:
    // Starts counting in every thread of every process of the tree under
    // `root` (host pids). Throws, saying why, if a counter cannot be opened
    // (no perf events, too many threads for the fd limit).
    vma_flag_watch(pid_t root, const watch_tracepoints& ids);

    struct verdict {
        bool quiet = false; // no such call, no new thread: VmFlags cannot have changed
        std::string why;    // when not quiet
    };
    // Once the tree is frozen: has anything happened since the start?
    [[nodiscard]] verdict check() const;

  private:
    pid_t _root;
    std::map<pid_t, std::vector<pid_t>> _threads; // by process, as at the start
    std::vector<unique_fd> _counters;
};

} // namespace ferry::proc
