#include "sys/expedited_rcu.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <system_error>

#include <fmt/format.h>

namespace ferry::expedited_rcu {

namespace {

// What this process's holds share, per knob file.
struct knob_state {
    int holds = 0;
    bool set_by_us = false; // we wrote 1 over a 0, and put it back at the last release
};

std::mutex registry_mu;
std::map<std::filesystem::path, knob_state> registry;

std::string read_value(const std::filesystem::path& p) {
    std::ifstream in(p);
    std::string v;
    in >> v;
    return v;
}

bool write_value(const std::filesystem::path& p, const std::string& v) {
    std::ofstream out(p);
    out << v << "\n";
    out.flush();
    return static_cast<bool>(out);
}

// One hold fewer; the last puts back the 0 it found. registry_mu is held.
void count_out(knob_state& st, const knob& k) noexcept {
    if (--st.holds > 0 || !st.set_by_us)
        return;
    st.set_by_us = false;
    if (write_value(k.value, "0")) {
        std::error_code ec;
        std::filesystem::remove(k.saved, ec);
    }
}

} // namespace

hold::hold(knob k, std::chrono::milliseconds limit) : _knob(std::move(k)), _limit(limit) {
    std::lock_guard lock(registry_mu);
    auto& st = registry[_knob.value];
    if (st.holds == 0) {
        const std::string found = read_value(_knob.value);
        if (found.empty()) {
            _why_not = fmt::format("{} cannot be read", _knob.value.string());
            return;
        }
        if (read_value(_knob.normal) == "1") {
            _why_not = fmt::format("{} is 1: this host never expedites", _knob.normal.string());
            return;
        }
        if (found == "0") {
            // The value found goes to disk before the change, for recover().
            if (!_knob.saved.empty() && !write_value(_knob.saved, found)) {
                _why_not = fmt::format("cannot write {}", _knob.saved.string());
                return;
            }
            if (!write_value(_knob.value, "1")) {
                _why_not =
                    fmt::format("cannot write {}: {}", _knob.value.string(), std::strerror(errno));
                std::error_code ec;
                std::filesystem::remove(_knob.saved, ec);
                return;
            }
            st.set_by_us = true;
        }
    }
    if (!st.set_by_us)
        _why_not = "already expedited on this host";
    st.holds++;
    _counted = true;
    try {
        _lapse.emplace(_limit, [this] { release(); });
    } catch (const std::system_error&) {
        // No hold without its bound.
        _counted = false;
        count_out(st, _knob);
        _why_not = fmt::format("no thread to end it after {} ms", _limit.count());
    }
}

hold::~hold() {
    _lapse.reset(); // the lapse's release, if due, has run by now
    release();
}

void hold::release() noexcept {
    {
        std::lock_guard lock(_mu);
        if (!_counted)
            return;
        _counted = false;
    }
    std::lock_guard lock(registry_mu);
    count_out(registry[_knob.value], _knob);
}

std::string hold::state() const {
    if (!_why_not.empty())
        return _why_not;
    if (_lapse && _lapse->lapsed())
        return fmt::format("lapsed after its limit of {} ms", _limit.count());
    return "held";
}

std::string recover(const knob& k) {
    if (k.saved.empty() || !std::filesystem::exists(k.saved))
        return {};
    const std::string saved = read_value(k.saved);
    if (saved != "0" && saved != "1")
        return fmt::format("{} holds '{}', not 0 or 1: left as it is", k.saved.string(), saved);
    if (!write_value(k.value, saved))
        return fmt::format("cannot put {} back to {}", k.value.string(), saved);
    std::error_code ec;
    std::filesystem::remove(k.saved, ec);
    return fmt::format("put {} back to {}: a daemon before this one died holding it",
                       k.value.string(), saved);
}

} // namespace ferry::expedited_rcu
