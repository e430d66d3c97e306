// Test-only fault injection, modelled on CRIU's CRIU_FAULT: the environment
// variable FERRY_FAULT holds a comma-separated list of named faults. Unset in
// production, so every check is a cheap flag test.
#pragma once

#include <string_view>

namespace ferry {

enum class fault : unsigned {
    dest_die_before_restore = 1u << 0, // destination daemon SIGKILLs itself on receiving images
    corrupt_images = 1u << 1,          // migrator flips a byte of pagemap images before shipping
    corrupt_page_once = 1u << 2,       // source corrupts one page after checksumming it, once
    corrupt_page_always = 1u << 3,     // source corrupts every reply's first page
    restore_fail = 1u << 4,            // destination breaks the images so criu restore fails
    interrupt_before_commit = 1u << 5, // migrator gets SIGINT as the destination asks to resume
    dest_fail_after_commit = 1u << 6,  // destination refuses the resume it was granted
    slow_pool_push = 1u << 7,          // source pauses 100 ms between pool push batches
    vma_flags_changed = 1u << 8,       // migrator's watch sees a madvise, source a changed flag
    slow_background = 1u << 9,         // destination pauses 10 ms after each background reply
                                       // and each slice of the staged copy
    warm_start_fail = 1u << 10,        // destination refuses its warm restore once it waits
    dest_die_warm = 1u << 11,          // destination SIGKILLs itself once its warm restore waits
    criu_fail_before_post_restore = 1u << 12, // destination's CRIU fails just before post-restore
    early_mounts_stale = 1u << 13, // destination adds a file to the early /dev image: it is stale
    dest_stall_before_restore = 1u << 14, // destination sleeps 60 s once it has every image
    // The migrator promises its heartbeats with the source daemon's
    // shortest silence bound (10 s), not 60 s.
    short_heartbeat_silence = 1u << 15,
    migrator_stop_before_register = 1u << 16, // migrator SIGSTOPs itself once the tree is dumped
    // The migrator SIGSTOPs itself once the source committed, before it
    // tells the destination to resume.
    migrator_stop_after_commit = 1u << 17,
    corrupt_precopy_page = 1u << 18, // source corrupts one pre-copy page after checksumming it
};

[[nodiscard]] bool fault_injected(fault f) noexcept;

} // namespace ferry
