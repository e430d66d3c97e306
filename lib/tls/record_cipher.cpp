#include "tls/record_cipher.hpp"

#include "core/error.hpp"
#include "tls/gnutls_error.hpp"

#include <fmt/format.h>

#include <cstring>
#include <utility>

namespace ferry::tls {

namespace {

// RFC 8446 section 5.5: AES-GCM keys are good for 2^24.5 full records; we
// stop at 2^24 (256 GiB of content in one direction of one connection).
constexpr uint64_t max_records = uint64_t(1) << 24;

uint64_t load_be64(const unsigned char b[8]) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | b[i];
    return v;
}

} // namespace

std::optional<record_cipher> record_cipher::take(gnutls_session_t s, bool read,
                                                 gcm_engine::implementation which) {
    if (gnutls_protocol_get_version(s) != GNUTLS_TLS1_3)
        return std::nullopt;
    const gnutls_cipher_algorithm_t alg = gnutls_cipher_get(s);
    if (alg != GNUTLS_CIPHER_AES_128_GCM && alg != GNUTLS_CIPHER_AES_256_GCM)
        return std::nullopt;
    gnutls_datum_t mac{}, iv{}, key{};
    unsigned char seq[8];
    check(gnutls_record_get_state(s, read ? 1 : 0, &mac, &iv, &key, seq), "TLS traffic keys");
    if (iv.size != 12)
        throw error("TLS traffic keys: unexpected IV size");
    return record_cipher(gcm_engine::make(alg, key, which), iv, load_be64(seq));
}

record_cipher::record_cipher(gcm_engine gcm, const gnutls_datum_t& iv, uint64_t seq) noexcept
    : _gcm(std::move(gcm)), _seq(seq) {
    std::memcpy(_iv, iv.data, sizeof _iv);
}

// The per-record nonce: the static IV XOR the 64-bit sequence number,
// left-padded (RFC 8446 section 5.3).
void record_cipher::next_nonce(uint8_t nonce[12]) {
    if (_seq >= max_records)
        throw error("TLS connection used its key for 2^24 records: reconnect to go on");
    std::memcpy(nonce, _iv, 12);
    for (int i = 0; i < 8; i++)
        nonce[4 + i] ^= uint8_t(_seq >> (56 - 8 * i));
    _seq++;
}

size_t record_cipher::length_of(const std::byte* header) noexcept {
    return (size_t(header[3]) << 8) | size_t(header[4]);
}

bool record_cipher::plausible(const std::byte* header) noexcept {
    const size_t len = length_of(header);
    return header[0] == std::byte{record::application_data} && header[1] == std::byte{3} &&
           header[2] == std::byte{3} && len >= 1 + record::tag_size &&
           len <= record::max_ciphertext;
}

size_t record_cipher::seal(const std::byte* content, size_t len, uint8_t type, std::byte* out) {
    uint8_t nonce[12];
    next_nonce(nonce);
    const size_t ciphertext = len + 1 + record::tag_size;
    out[0] = std::byte{record::application_data};
    out[1] = out[2] = std::byte{3};
    out[3] = std::byte(ciphertext >> 8);
    out[4] = std::byte(ciphertext & 0xff);
    std::byte* body = out + record::header_size;
    // GCM takes whole blocks until the last call: the content's whole blocks
    // straight from the writer's buffer, then its rest and the type byte.
    const size_t bulk = len & ~size_t(15);
    std::byte tail[16];
    const size_t rest = len - bulk;
    std::memcpy(tail, content + bulk, rest);
    tail[rest] = std::byte{type};
    if (!_gcm.start(nonce, out, record::header_size) ||
        (bulk && !_gcm.encrypt(content, bulk, body)) ||
        !_gcm.encrypt(tail, rest + 1, body + bulk) ||
        !_gcm.tag(reinterpret_cast<uint8_t*>(body + len + 1)))
        throw error(fmt::format("TLS record seal failed ({})", _gcm.name()));
    return record::header_size + ciphertext;
}

std::optional<record_cipher::opened> record_cipher::open(const std::byte* rec, size_t rec_len,
                                                         std::byte* dst, size_t room,
                                                         std::byte* spill) {
    uint8_t nonce[12];
    next_nonce(nonce);
    const size_t inner = rec_len - record::header_size - record::tag_size; // content, type, zeros
    const std::byte* body = rec + record::header_size;
    // The inner plaintext's whole blocks, then the rest (1..16 bytes, where
    // the type byte is when there is no padding).
    const size_t bulk = (inner - 1) & ~size_t(15);
    std::byte* bulk_dst = room >= bulk ? dst : spill;
    std::byte* tail_dst = room >= inner ? dst + bulk : bulk_dst == spill ? spill + bulk : spill;
    if (!_gcm.start(nonce, rec, record::header_size))
        return std::nullopt;
    if (bulk && !_gcm.decrypt(body, bulk, bulk_dst))
        return std::nullopt;
    if (!_gcm.decrypt(body + bulk, inner - bulk, tail_dst))
        return std::nullopt;
    uint8_t tag[record::tag_size];
    if (!_gcm.tag(tag) || gnutls_memcmp(tag, body + inner, sizeof tag) != 0)
        return std::nullopt;

    // The type is the last non-zero byte; zeros after it are padding.
    auto at = [&](size_t i) { return i >= bulk ? tail_dst[i - bulk] : bulk_dst[i]; };
    size_t type_at = inner;
    while (type_at > 0 && at(type_at - 1) == std::byte{0})
        type_at--;
    opened r;
    if (type_at == 0)
        return r; // all padding: type 0, which no record may have
    r.content = type_at - 1;
    r.type = uint8_t(at(r.content));
    if (bulk_dst == spill)
        r.in_spill = r.content;
    else if (tail_dst == spill)
        r.in_spill = r.content > bulk ? r.content - bulk : 0;
    return r;
}

} // namespace ferry::tls
