// What the installed CRIU can do beyond stock 4.1.1, probed by running it:
// the patches in examples/criu-patches may be missing on a host whose CRIU
// came from elsewhere, and Ferry then works as before, only slower.
#pragma once

#include <string>

namespace ferry::criu {

// Whether `criu` knows the option `name` (without its dashes). CRIU parses
// options in order, so a known one is taken and --version then exits 0; an
// unknown one is a usage error. Probed once per option and binary in a
// process, bounded by 2 s; a CRIU that fails the probe counts as lacking it.
[[nodiscard]] bool supports_option(const std::string& criu, const std::string& name);
// Whether `criu` takes option --name with `value` (probed once).
[[nodiscard]] bool supports_option_value(const std::string& criu, const std::string& name,
                                         const std::string& value);
// Whether `criu check --feature name` passes (bounded and cached likewise).
[[nodiscard]] bool supports_feature(const std::string& criu, const std::string& name);

// Where a dump with `mnt-early` (criu-patches/0030) writes the tree's mount
// namespace before the freeze, in its images dir; a restore that waits
// builds the mount tree from it there.
inline constexpr const char* mounts_early_dir = "mnt-early";

// The lazy dump options of Ferry's patches, as config lines, and which the
// installed CRIU takes.
struct lazy_dump_features {
    // --lazy-pagemap-only (criu-patches/0004): lazy pages are recorded in
    // the pagemap and never parked in pipes; Ferry reads them from the
    // frozen tasks itself.
    bool pagemap_only = false;
    // --lazy-whole-vmas (0006): lazy VMAs are recorded whole, unscanned;
    // the source finds their holes after the freeze.
    bool whole_vmas = false;
    // --smaps-before-freeze (0005): VmFlags read before the freeze, so the
    // source must check them against the frozen tasks before the commit.
    bool smaps_before_freeze = false;
    // network-lock nftables (stock CRIU, when built with libnftables): a
    // dumped network namespace is locked and unlocked by CRIU itself, not by
    // running iptables-restore inside it at the freeze, and again on the
    // destination just before the resume (tens of milliseconds each here).
    // The images record the method; the destination's CRIU must know it, so
    // the migrator sets it only when the destination said so. Not a config
    // line: dump_settings::network_lock_nftables carries it.
    bool network_lock_nftables = false;
    // network-lock skip: with tcp-close no connection moves (they come back
    // closed) and skip-in-flight leaves the half-accepted ones behind, so
    // nothing needs the lock: a container's resume no longer waits for the
    // lock's table to be deleted (10-20 ms here), and connections that reach
    // the copy before it runs are accepted by its kernel instead of dropped
    // (which costs the client a SYN retransmission, a second or more).
    // Also when the container's network namespace has no TCP socket before
    // the freeze: one made later makes CRIU refuse the dump (no
    // tcp-established, no skip-in-flight), and the source runs on.
    bool network_lock_skip = false;
    std::string network_lock_skip_because;

    static lazy_dump_features probe(const std::string& criu);
    // The config lines for the features that are on (not the network lock).
    [[nodiscard]] std::string config_lines() const;
};

// Whether a restore can wait for its images (--restore-wait-fd FD,
// criu-patches/0015): CRIU started and set up before they arrive reads one
// byte from FD before it reads them. Probed once per process.
[[nodiscard]] bool supports_restore_wait(const std::string& criu);

// The restore options of Ferry's patches that every restore takes where the
// installed CRIU has them, as config lines: --seccomp-early (0027), with
// which the tasks load their seccomp filters while CRIU runs post-restore
// (the commit gate) instead of after it, inside the resume. Probed once per
// process, like the options above.
[[nodiscard]] std::string restore_feature_lines(const std::string& criu);

} // namespace ferry::criu
