#include "wire/page_wire.hpp"

#include "core/wire_bytes.hpp"

namespace ferry::wire {

namespace {

using wire_bytes::load_le;
using wire_bytes::store_le;

constexpr uint64_t page_mask = 4095;

header_bytes encode_common(uint32_t magic, uint16_t word, uint32_t pid, uint32_t nr, uint64_t vaddr,
                           uint64_t id) noexcept {
    header_bytes b{};
    store_le<uint32_t>(&b[0], magic);
    store_le<uint16_t>(&b[4], page_protocol_version);
    store_le<uint16_t>(&b[6], word);
    store_le<uint32_t>(&b[8], pid);
    store_le<uint32_t>(&b[12], nr);
    store_le<uint64_t>(&b[16], vaddr);
    store_le<uint64_t>(&b[24], id);
    return b;
}

decode_error check_common(const header_bytes& b, uint32_t magic) noexcept {
    if (load_le<uint32_t>(&b[0]) != magic)
        return decode_error::bad_magic;
    if (load_le<uint16_t>(&b[4]) != page_protocol_version)
        return decode_error::bad_version;
    return decode_error::none;
}

} // namespace

std::string_view to_string(status s) noexcept {
    switch (s) {
    case status::ok:
        return "ok";
    case status::unknown_migration:
        return "unknown migration";
    case status::out_of_range:
        return "range is not lazy";
    case status::read_failed:
        return "source memory read failed";
    case status::bad_request:
        return "bad request";
    }
    return "unknown status";
}

std::string_view to_string(decode_error e) noexcept {
    switch (e) {
    case decode_error::none:
        return "none";
    case decode_error::bad_magic:
        return "bad magic";
    case decode_error::bad_version:
        return "unsupported version";
    case decode_error::bad_op:
        return "unknown operation";
    case decode_error::bad_status:
        return "unknown status";
    case decode_error::bad_length:
        return "bad page count";
    case decode_error::unaligned:
        return "address not page aligned";
    }
    return "unknown error";
}

header_bytes encode(const page_request& r) noexcept {
    return encode_common(request_magic, uint16_t(r.operation), r.pid, r.nr_pages, r.vaddr,
                         r.request_id);
}

header_bytes encode(const page_reply& r) noexcept {
    return encode_common(reply_magic, uint16_t(r.result), r.pid, r.nr_pages, r.vaddr, r.request_id);
}

decode_error decode(const header_bytes& b, page_request& out) noexcept {
    if (auto e = check_common(b, request_magic); e != decode_error::none)
        return e;
    const uint16_t operation = load_le<uint16_t>(&b[6]);
    if (operation != uint16_t(op::get) && operation != uint16_t(op::done) &&
        operation != uint16_t(op::refetch) && operation != uint16_t(op::discarded))
        return decode_error::bad_op;
    out.operation = op(operation);
    out.pid = load_le<uint32_t>(&b[8]);
    out.nr_pages = load_le<uint32_t>(&b[12]);
    out.vaddr = load_le<uint64_t>(&b[16]);
    out.request_id = load_le<uint64_t>(&b[24]);
    if (!is_notice(out.operation) && (out.nr_pages == 0 || out.nr_pages > max_pages_per_request))
        return decode_error::bad_length;
    if (out.vaddr & page_mask)
        return decode_error::unaligned;
    return decode_error::none;
}

decode_error decode(const header_bytes& b, page_reply& out) noexcept {
    if (auto e = check_common(b, reply_magic); e != decode_error::none)
        return e;
    const uint16_t st = load_le<uint16_t>(&b[6]);
    if (st > uint16_t(status::bad_request))
        return decode_error::bad_status;
    out.result = status(st);
    out.pid = load_le<uint32_t>(&b[8]);
    out.nr_pages = load_le<uint32_t>(&b[12]);
    out.vaddr = load_le<uint64_t>(&b[16]);
    out.request_id = load_le<uint64_t>(&b[24]);
    if (out.nr_pages > max_pages_per_request || (out.result != status::ok && out.nr_pages != 0))
        return decode_error::bad_length;
    if (out.vaddr & page_mask)
        return decode_error::unaligned;
    return decode_error::none;
}

} // namespace ferry::wire
