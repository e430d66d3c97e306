#include "transport/fabric.hpp"

#include "core/clock.hpp"
#include "core/error.hpp"
#include "transport/backend.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cmath>

namespace ferry {

void link_model::charge(uint64_t start_ns, size_t bytes) const noexcept {
    if (free())
        return;
    const uint64_t until = start_ns + cost_ns(bytes);
    while (monotonic_ns() < until) {
        __builtin_ia32_pause();
    }
}

namespace {

// "2us" -> 2000 (ns). Units: ns, us, ms.
uint64_t parse_duration_ns(const std::string& v) {
    double x = 0;
    auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
    const std::string unit(ptr, v.data() + v.size());
    if (ec != std::errc() || x < 0)
        throw error(fmt::format("'{}' is not a duration (e.g. 2us)", v));
    if (unit == "ns")
        return uint64_t(std::llround(x));
    if (unit == "us")
        return uint64_t(std::llround(x * 1e3));
    if (unit == "ms")
        return uint64_t(std::llround(x * 1e6));
    throw error(fmt::format("'{}': the unit must be ns, us or ms", v));
}

// "100gbit" -> nanoseconds per byte. Units: gbit, mbit, gbyte, mbyte (and GB, MB).
double parse_ns_per_byte(const std::string& v) {
    double x = 0;
    auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
    const std::string unit(ptr, v.data() + v.size());
    if (ec != std::errc() || x <= 0)
        throw error(fmt::format("'{}' is not a bandwidth (e.g. 100gbit)", v));
    double bytes_per_s;
    if (unit == "gbit")
        bytes_per_s = x * 1e9 / 8;
    else if (unit == "mbit")
        bytes_per_s = x * 1e6 / 8;
    else if (unit == "gbyte" || unit == "GB")
        bytes_per_s = x * 1e9;
    else if (unit == "mbyte" || unit == "MB")
        bytes_per_s = x * 1e6;
    else
        throw error(fmt::format("'{}': the unit must be gbit, mbit, gbyte or mbyte", v));
    return 1e9 / bytes_per_s;
}

} // namespace

fabric_spec fabric_spec::parse(const std::string& text) {
    fabric_spec s;
    const auto colon = text.find(':');
    s.name = text.substr(0, colon);
    const auto& backend = transport::find(s.name); // throws for an unknown one
    if (colon == std::string::npos)
        return s;
    if (!backend.takes_link_model())
        throw error(fmt::format("the {} fabric takes no latency and bandwidth model", s.name));
    std::string opts = text.substr(colon + 1);
    while (!opts.empty()) {
        const auto comma = opts.find(',');
        const std::string kv = opts.substr(0, comma);
        opts = comma == std::string::npos ? "" : opts.substr(comma + 1);
        const auto eq = kv.find('=');
        if (eq == std::string::npos)
            throw error(fmt::format("'{}' is not key=value", kv));
        const std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
        if (key == "lat")
            s.model.latency_ns = parse_duration_ns(value);
        else if (key == "bw")
            s.model.ns_per_byte = parse_ns_per_byte(value);
        else
            throw error(fmt::format("unknown fabric option '{}' (lat, bw)", key));
    }
    return s;
}

std::string fabric_spec::to_string() const {
    std::string s = name;
    if (model.latency_ns || model.ns_per_byte > 0) {
        s += fmt::format(":lat={}ns", model.latency_ns);
        if (model.ns_per_byte > 0)
            s += fmt::format(",bw={:.6g}gbit", 8.0 / model.ns_per_byte);
    }
    return s;
}

} // namespace ferry
