#include "sys/netns_socket_tables.hpp"

#include "core/error.hpp"

#include <fmt/format.h>

#include <charconv>
#include <fstream>
#include <optional>
#include <sstream>

namespace ferry::netns_socket_tables {

namespace {

const setting settings_known[] = {
    {"net.ipv4.tcp_child_ehash_entries", "net/ipv4/tcp_child_ehash_entries", tcp_buckets},
    {"net.ipv4.udp_child_hash_entries", "net/ipv4/udp_child_hash_entries", udp_slots},
};

std::optional<uint32_t> read_value(const std::filesystem::path& file) {
    std::ifstream in(file);
    std::string text;
    if (!in || !(in >> text))
        return std::nullopt;
    uint32_t v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size())
        throw error(fmt::format("{}: not a number: \"{}\"", file.string(), text));
    return v;
}

} // namespace

std::vector<setting> plan(const std::filesystem::path& proc_sys) {
    std::vector<setting> out;
    for (const auto& k : settings_known) {
        const auto v = read_value(proc_sys / k.path);
        if (v && *v == 0)
            out.push_back(k);
    }
    return out;
}

std::string apply(const std::filesystem::path& proc_sys, const std::vector<setting>& settings) {
    for (const auto& s : settings) {
        const auto file = proc_sys / s.path;
        {
            std::ofstream out(file);
            out << s.wanted << '\n';
            out.flush();
            if (!out)
                throw error(
                    fmt::format("cannot write {} = {} ({})", s.name, s.wanted, file.string()));
        }
        // The kernel rounds the TCP size up to a power of two and may clamp:
        // any non-zero value gives children a table of their own.
        const auto now = read_value(file);
        if (!now || *now == 0)
            throw error(fmt::format("{} did not take {}", s.name, s.wanted));
    }
    return describe(proc_sys);
}

std::string describe(const std::filesystem::path& proc_sys) {
    std::ostringstream out;
    const char* sep = "";
    for (const auto& k : settings_known) {
        const auto v = read_value(proc_sys / k.path);
        out << sep << k.name << '=' << (v ? std::to_string(*v) : std::string("absent"));
        sep = ", ";
    }
    return out.str();
}

} // namespace ferry::netns_socket_tables
