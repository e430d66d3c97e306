#include "park.hpp"

#include "core/error.hpp"
#include "core/log.hpp"
#include "pool/pool_blob.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace ferry::migrator {

void parked_record_deleter::operator()(FerryControl__ParkedWorkload* p) const noexcept {
    ferry_control__parked_workload__free_unpacked(p, nullptr);
}

void check_park_name(std::string_view name) {
    const bool ok =
        !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
            return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   c == '_' || c == '.' || c == '-';
        });
    if (!ok)
        throw error(fmt::format("'{}' is not a usable name: 1-64 of A-Z a-z 0-9 _ . -", name));
}

pool::pool_spec record_spec(const pool::pool_spec& pool) {
    pool::pool_spec s;
    s.nodes = pool.nodes;
    s.credentials = pool.credentials;
    s.level = s.nodes.size() >= 2 ? raid::level::raid1 : raid::level::raid0;
    s.kind = pool::stripe_kind::whole_pages;
    return s;
}

uint64_t record_object(std::string_view name) {
    return pool::object_for(fmt::format("parked:{}", name));
}

uint64_t store_record(const pool::pool_spec& pool, const FerryControl__ParkedWorkload& record) {
    std::vector<std::byte> bytes(ferry_control__parked_workload__get_packed_size(&record));
    ferry_control__parked_workload__pack(&record, reinterpret_cast<uint8_t*>(bytes.data()));
    pool::put_blob(record_spec(pool), record_object(record.name), bytes);
    return bytes.size();
}

parked_record load_record(const pool::pool_spec& pool, std::string_view name) {
    const auto bytes = pool::get_blob(record_spec(pool), record_object(name));
    if (!bytes)
        return nullptr;
    parked_record r(ferry_control__parked_workload__unpack(
        nullptr, bytes->size(), reinterpret_cast<const uint8_t*>(bytes->data())));
    if (!r)
        throw error(fmt::format("the pool's record of '{}' is malformed", name));
    if (r->name != name)
        throw error(fmt::format("the pool's record of '{}' names '{}'", name, r->name));
    return r;
}

void drop_record(const pool::pool_spec& pool, std::string_view name) noexcept {
    try {
        pool::drop_blob(record_spec(pool), record_object(name));
    } catch (const std::exception& e) {
        make_logger("migrator")
            ->warn("cannot drop the record of '{}' from the pool: {}", name, e.what());
    }
}

} // namespace ferry::migrator
