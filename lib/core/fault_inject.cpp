#include "core/fault_inject.hpp"

#include <cstdlib>
#include <string>

namespace ferry {

namespace {

unsigned parse_faults() {
    const char* env = std::getenv("FERRY_FAULT");
    if (!env)
        return 0;
    unsigned mask = 0;
    std::string_view list(env);
    while (!list.empty()) {
        auto comma = list.find(',');
        std::string_view name = list.substr(0, comma);
        if (name == "dest-die-before-restore")
            mask |= unsigned(fault::dest_die_before_restore);
        else if (name == "corrupt-images")
            mask |= unsigned(fault::corrupt_images);
        else if (name == "corrupt-page-once")
            mask |= unsigned(fault::corrupt_page_once);
        else if (name == "corrupt-page-always")
            mask |= unsigned(fault::corrupt_page_always);
        else if (name == "restore-fail")
            mask |= unsigned(fault::restore_fail);
        else if (name == "interrupt-before-commit")
            mask |= unsigned(fault::interrupt_before_commit);
        else if (name == "dest-fail-after-commit")
            mask |= unsigned(fault::dest_fail_after_commit);
        else if (name == "slow-pool-push")
            mask |= unsigned(fault::slow_pool_push);
        else if (name == "vma-flags-changed")
            mask |= unsigned(fault::vma_flags_changed);
        else if (name == "slow-background")
            mask |= unsigned(fault::slow_background);
        else if (name == "warm-start-fail")
            mask |= unsigned(fault::warm_start_fail);
        else if (name == "dest-die-warm")
            mask |= unsigned(fault::dest_die_warm);
        else if (name == "criu-fail-before-post-restore")
            mask |= unsigned(fault::criu_fail_before_post_restore);
        else if (name == "early-mounts-stale")
            mask |= unsigned(fault::early_mounts_stale);
        else if (name == "dest-stall-before-restore")
            mask |= unsigned(fault::dest_stall_before_restore);
        else if (name == "short-heartbeat-silence")
            mask |= unsigned(fault::short_heartbeat_silence);
        else if (name == "migrator-stop-before-register")
            mask |= unsigned(fault::migrator_stop_before_register);
        else if (name == "migrator-stop-after-commit")
            mask |= unsigned(fault::migrator_stop_after_commit);
        else if (name == "corrupt-precopy-page")
            mask |= unsigned(fault::corrupt_precopy_page);
        list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    }
    return mask;
}

} // namespace

bool fault_injected(fault f) noexcept {
    static const unsigned mask = parse_faults();
    return mask & unsigned(f);
}

} // namespace ferry
