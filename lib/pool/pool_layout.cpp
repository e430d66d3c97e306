#include "pool/pool_layout.hpp"

#include "core/error.hpp"
#include "core/page.hpp"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <charconv>
#include <tuple>

namespace ferry::pool {

std::string_view to_string(stripe_kind k) noexcept {
    return k == stripe_kind::whole_pages ? "whole" : "split";
}

stripe_kind parse_stripe_kind(std::string_view s) {
    if (s == "whole")
        return stripe_kind::whole_pages;
    if (s == "split")
        return stripe_kind::split_pages;
    throw error(fmt::format("unknown stripe layout '{}' (expected whole or split)", s));
}

stripe_layout stripe_layout::make(raid::level l, uint32_t nodes, stripe_kind k) {
    stripe_layout s;
    s.geo = raid::geometry::over(l, nodes);
    s.kind = k;
    if (k == stripe_kind::whole_pages) {
        s.pages_per_stripe = s.geo.data;
        s.member_len = uint32_t(page_size);
        return s;
    }
    s.pages_per_stripe = 1;
    s.member_len = uint32_t(page_size / s.geo.data);
    if (page_size % s.geo.data != 0 || s.member_len % raid::alignment != 0)
        throw error(fmt::format("split pages need a page to cut into equal slices of a multiple "
                                "of {} bytes; {} has {} data members (use 1, 2, 4, 8 or 16)",
                                raid::alignment, s.geo.describe(), s.geo.data));
    return s;
}

std::string stripe_layout::describe() const {
    return fmt::format("{}, {} pages: {} page(s) per stripe, {} B members", geo.describe(),
                       pool::to_string(kind), pages_per_stripe, member_len);
}

namespace {

std::string join(const std::vector<net::endpoint>& eps) {
    std::string out;
    for (const auto& e : eps) {
        if (!out.empty())
            out += ',';
        out += e.to_string();
    }
    return out;
}

} // namespace

std::vector<net::endpoint> pool_spec::parse_nodes(std::string_view list) {
    std::vector<net::endpoint> out;
    while (!list.empty()) {
        const size_t comma = list.find(',');
        const auto item = list.substr(0, comma);
        if (item.empty())
            throw error("empty entry in the pool's node list");
        out.push_back(net::parse_endpoint(std::string(item)));
        if (comma == std::string_view::npos)
            break;
        list.remove_prefix(comma + 1);
    }
    if (out.empty())
        throw error("the pool's node list is empty");
    return out;
}

std::string pool_spec::to_string() const {
    std::string s = fmt::format("raid={} layout={} nodes={}", raid::to_string(level).substr(4),
                                pool::to_string(kind), join(nodes));
    if (!spares.empty())
        s += " spares=" + join(spares);
    if (object)
        s += fmt::format(" object={:016x}", *object);
    return s;
}

uint64_t pool_spec::object_of(std::string_view migration_id) const noexcept {
    return object.value_or(object_for(migration_id));
}

pool_spec pool_spec::parse(std::string_view text) {
    pool_spec p;
    bool have_nodes = false;
    while (!text.empty()) {
        const size_t sp = text.find(' ');
        const auto item = text.substr(0, sp);
        text = sp == std::string_view::npos ? std::string_view{} : text.substr(sp + 1);
        if (item.empty())
            continue;
        const size_t eq = item.find('=');
        if (eq == std::string_view::npos)
            throw error(fmt::format("malformed pool description '{}'", item));
        const auto key = item.substr(0, eq), value = item.substr(eq + 1);
        if (key == "raid")
            p.level = raid::parse_level(value);
        else if (key == "layout")
            p.kind = parse_stripe_kind(value);
        else if (key == "nodes") {
            p.nodes = parse_nodes(value);
            have_nodes = true;
        } else if (key == "spares") {
            p.spares = parse_nodes(value);
        } else if (key == "object") {
            uint64_t id = 0;
            const auto [end, ec] =
                std::from_chars(value.data(), value.data() + value.size(), id, 16);
            if (value.empty() || ec != std::errc() || end != value.data() + value.size())
                throw error(fmt::format("malformed pool object id '{}'", value));
            p.object = id;
        } else
            throw error(fmt::format("unknown pool setting '{}'", key));
    }
    if (!have_nodes)
        throw error("the pool description names no nodes");
    (void)p.layout(); // throws if the level cannot run over these nodes
    return p;
}

uint64_t object_for(std::string_view migration_id) noexcept {
    return XXH3_64bits(migration_id.data(), migration_id.size());
}

} // namespace ferry::pool
