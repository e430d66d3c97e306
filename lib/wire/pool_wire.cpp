#include "wire/pool_wire.hpp"

#include "core/wire_bytes.hpp"

namespace ferry::pool {

namespace {

using wire_bytes::load_le;
using wire_bytes::store_le;

void encode_tail(header_bytes& b, uint64_t object, uint64_t chunk, uint32_t meta_len,
                 uint32_t data_len, uint64_t id) noexcept {
    store_le<uint64_t>(&b[8], object);
    store_le<uint64_t>(&b[16], chunk);
    store_le<uint32_t>(&b[24], meta_len);
    store_le<uint32_t>(&b[28], data_len);
    store_le<uint64_t>(&b[32], id);
}

decode_error check_head(const header_bytes& b, uint32_t magic) noexcept {
    if (load_le<uint32_t>(&b[0]) != magic)
        return decode_error::bad_magic;
    if (load_le<uint16_t>(&b[4]) != protocol_version)
        return decode_error::bad_version;
    return decode_error::none;
}

template <typename T>
void decode_tail(const header_bytes& b, T& out) noexcept {
    out.object = load_le<uint64_t>(&b[8]);
    out.chunk = load_le<uint64_t>(&b[16]);
    out.meta_len = load_le<uint32_t>(&b[24]);
    out.data_len = load_le<uint32_t>(&b[28]);
    out.request_id = load_le<uint64_t>(&b[32]);
}

} // namespace

std::string_view to_string(status s) noexcept {
    switch (s) {
    case status::ok:
        return "ok";
    case status::not_found:
        return "not found";
    case status::bad_request:
        return "bad request";
    case status::no_space:
        return "no space (memory and disk tier full)";
    case status::io_error:
        return "disk tier I/O error";
    case status::corrupt:
        return "stored copy corrupt";
    case status::forbidden:
        return "forbidden: this host is not part of the object's migration";
    }
    return "unknown status";
}

std::string_view to_string(op o) noexcept {
    switch (o) {
    case op::put:
        return "put";
    case op::get:
        return "get";
    case op::drop:
        return "drop";
    case op::stats:
        return "stats";
    case op::ping:
        return "ping";
    case op::grant:
        return "grant";
    }
    return "unknown op";
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
        return "bad payload length";
    }
    return "unknown error";
}

header_bytes encode(const request& r) noexcept {
    header_bytes b{};
    store_le<uint32_t>(&b[0], request_magic);
    store_le<uint16_t>(&b[4], protocol_version);
    store_le<uint16_t>(&b[6], uint16_t(r.operation));
    encode_tail(b, r.object, r.chunk, r.meta_len, r.data_len, r.request_id);
    return b;
}

header_bytes encode(const reply& r) noexcept {
    header_bytes b{};
    store_le<uint32_t>(&b[0], reply_magic);
    store_le<uint16_t>(&b[4], protocol_version);
    store_le<uint8_t>(&b[6], uint8_t(r.result));
    store_le<uint8_t>(&b[7], uint8_t(r.served_from));
    encode_tail(b, r.object, r.chunk, r.meta_len, r.data_len, r.request_id);
    return b;
}

decode_error decode(const header_bytes& b, request& out) noexcept {
    if (auto e = check_head(b, request_magic); e != decode_error::none)
        return e;
    const uint16_t o = load_le<uint16_t>(&b[6]);
    if (o < uint16_t(op::put) || o > uint16_t(op::grant))
        return decode_error::bad_op;
    out.operation = op(o);
    decode_tail(b, out);
    if (out.meta_len > max_meta_len || out.data_len > max_data_len)
        return decode_error::bad_length;
    if (out.operation == op::grant && (!out.meta_len || out.data_len))
        return decode_error::bad_length; // the grantee's name, nothing else
    if (out.operation != op::put && out.operation != op::grant && (out.meta_len || out.data_len))
        return decode_error::bad_length;
    return decode_error::none;
}

decode_error decode(const header_bytes& b, reply& out) noexcept {
    if (auto e = check_head(b, reply_magic); e != decode_error::none)
        return e;
    const uint8_t st = load_le<uint8_t>(&b[6]);
    const uint8_t t = load_le<uint8_t>(&b[7]);
    if (st > uint8_t(status::forbidden) || t > uint8_t(tier::disk))
        return decode_error::bad_status;
    out.result = status(st);
    out.served_from = tier(t);
    decode_tail(b, out);
    if (out.meta_len > max_meta_len || out.data_len > max_data_len)
        return decode_error::bad_length;
    if (out.result != status::ok && (out.meta_len || out.data_len))
        return decode_error::bad_length;
    return decode_error::none;
}

} // namespace ferry::pool
