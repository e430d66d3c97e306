#include "criu/criu_features.hpp"

#include "sys/subprocess.hpp"

#include <chrono>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace ferry::criu {

namespace {

// Runs `command` once per process (bounded by 2 s): true if it exited 0.
bool probe_once(const std::vector<std::string>& command) {
    static std::mutex lock;
    static std::map<std::vector<std::string>, bool> known;
    const std::scoped_lock hold(lock);
    if (auto it = known.find(command); it != known.end())
        return it->second;
    bool passed = false;
    try {
        (void)run_capture(command, std::chrono::seconds(2));
        passed = true;
    } catch (const std::exception&) {
        // a usage error, a missing binary, a hang: all mean "not here"
    }
    known.emplace(command, passed);
    return passed;
}

} // namespace

bool supports_option(const std::string& criu, const std::string& name) {
    return probe_once({criu, "--" + name, "--version"});
}

bool supports_option_value(const std::string& criu, const std::string& name,
                           const std::string& value) {
    return probe_once({criu, "--" + name, value, "--version"});
}

bool supports_restore_wait(const std::string& criu) {
    return supports_option_value(criu, "restore-wait-fd", "0");
}

bool supports_feature(const std::string& criu, const std::string& name) {
    return probe_once({criu, "check", "--feature", name});
}

std::string restore_feature_lines(const std::string& criu) {
    return supports_option(criu, "seccomp-early") ? "seccomp-early\n" : "";
}

lazy_dump_features lazy_dump_features::probe(const std::string& criu) {
    lazy_dump_features f;
    f.pagemap_only = supports_option(criu, "lazy-pagemap-only");
    f.whole_vmas = f.pagemap_only && supports_option(criu, "lazy-whole-vmas");
    f.smaps_before_freeze = supports_option(criu, "smaps-before-freeze");
    return f;
}

std::string lazy_dump_features::config_lines() const {
    std::string lines;
    if (pagemap_only)
        lines += "lazy-pagemap-only\n";
    if (whole_vmas)
        lines += "lazy-whole-vmas\n";
    if (smaps_before_freeze)
        lines += "smaps-before-freeze\n";
    return lines;
}

} // namespace ferry::criu
