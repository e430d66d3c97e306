// lib/tls/gcm_engine: libipsec-mb's AES-GCM and GnuTLS's give the same
// bytes for the same key, nonce and header, whatever pieces the text comes
// in, and a changed byte changes the tag. tls_records_test checks the
// records themselves against GnuTLS's own record layer.
#include "byte_pattern.hpp"
#include "tls/gcm_engine.hpp"

#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

using namespace ferry;
using tls::gcm_engine;

namespace {

std::vector<std::byte> from_hex(const std::string& h) {
    std::vector<std::byte> v(h.size() / 2);
    for (size_t i = 0; i < v.size(); i++)
        v[i] = std::byte(std::stoi(h.substr(2 * i, 2), nullptr, 16));
    return v;
}

struct sealed {
    std::vector<std::byte> text;
    std::vector<uint8_t> tag = std::vector<uint8_t>(gcm_engine::tag_size);
};

// Encrypts (or decrypts) `in` in the given pieces, in order.
sealed run(gcm_engine& e, bool decrypt, const uint8_t* nonce, const std::vector<std::byte>& aad,
           const std::vector<std::byte>& in, const std::vector<size_t>& pieces) {
    sealed out;
    out.text.resize(in.size());
    REQUIRE(e.start(nonce, aad.data(), aad.size()));
    size_t at = 0;
    for (size_t len : pieces) {
        REQUIRE(at + len <= in.size());
        REQUIRE((decrypt ? e.decrypt(in.data() + at, len, out.text.data() + at)
                         : e.encrypt(in.data() + at, len, out.text.data() + at)));
        at += len;
    }
    REQUIRE(at == in.size());
    REQUIRE(e.tag(out.tag.data()));
    return out;
}

// GnuTLS wants whole blocks until a message's last call.
std::vector<size_t> blocks_then_rest(size_t n) {
    const size_t bulk = n & ~size_t(15);
    if (bulk == 0 || bulk == n)
        return {n};
    return {bulk, n - bulk};
}

// Pieces that cut blocks in odd places: what libipsec-mb must carry across
// calls.
std::vector<size_t> ragged(size_t n) {
    std::vector<size_t> p;
    size_t step = 1;
    while (n > 0) {
        const size_t len = std::min(n, step);
        p.push_back(len);
        n -= len;
        step = step * 3 + 2;
    }
    return p;
}

gnutls_datum_t datum(std::vector<std::byte>& v) {
    return gnutls_datum_t{reinterpret_cast<unsigned char*>(v.data()), unsigned(v.size())};
}

} // namespace

TEST_CASE("AES-GCM gives the published answer in both implementations", "[gcm]") {
    // The GCM specification's test case 4 (McGrew and Viega): AES-128,
    // a 96-bit IV, 20 bytes of additional data, 60 bytes of text.
    auto key = from_hex("feffe9928665731c6d6a8f9467308308");
    const auto iv = from_hex("cafebabefacedbaddecaf888");
    const auto aad = from_hex("feedfacedeadbeeffeedfacedeadbeefabaddad2");
    const auto plain = from_hex("d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72"
                                "1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39");
    const auto cipher = from_hex("42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e"
                                 "21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091");
    const auto tag = from_hex("5bc94fbc3221a5db94fae95ae7121a47");
    const auto* nonce = reinterpret_cast<const uint8_t*>(iv.data());
    for (auto which : {gcm_engine::implementation::fastest, gcm_engine::implementation::gnutls}) {
        auto e = gcm_engine::make(GNUTLS_CIPHER_AES_128_GCM, datum(key), which);
        INFO(e.name());
        const auto s = run(e, false, nonce, aad, plain, blocks_then_rest(plain.size()));
        CHECK(s.text == cipher);
        CHECK(std::memcmp(s.tag.data(), tag.data(), tag.size()) == 0);
        const auto o = run(e, true, nonce, aad, cipher, blocks_then_rest(cipher.size()));
        CHECK(o.text == plain);
        CHECK(o.tag == s.tag);
    }
}

TEST_CASE("the two AES-GCM implementations agree on every length and piece", "[gcm]") {
    for (auto alg : {GNUTLS_CIPHER_AES_128_GCM, GNUTLS_CIPHER_AES_256_GCM}) {
        auto key = test::byte_pattern(alg == GNUTLS_CIPHER_AES_128_GCM ? 16 : 32, 1);
        auto fast = gcm_engine::make(alg, datum(key), gcm_engine::implementation::fastest);
        auto reference = gcm_engine::make(alg, datum(key), gcm_engine::implementation::gnutls);
        const auto aad = test::byte_pattern(5, 2);
        for (size_t n :
             {size_t(1), size_t(15), size_t(16), size_t(17), size_t(4097), size_t(16385)}) {
            INFO(fast.name() << ", " << n << " bytes");
            uint8_t nonce[gcm_engine::nonce_size];
            std::memcpy(nonce, test::byte_pattern(sizeof nonce, unsigned(n)).data(), sizeof nonce);
            const auto plain = test::byte_pattern(n, 3);
            const auto want = run(reference, false, nonce, aad, plain, blocks_then_rest(n));
            const auto got = run(fast, false, nonce, aad, plain, ragged(n));
            CHECK(got.text == want.text);
            CHECK(got.tag == want.tag);

            // Each opens the other's, with the same tag.
            CHECK(run(fast, true, nonce, aad, want.text, ragged(n)).text == plain);
            const auto back = run(reference, true, nonce, aad, got.text, blocks_then_rest(n));
            CHECK(back.text == plain);
            CHECK(back.tag == got.tag);

            // One changed bit of text or header: another tag.
            auto bent = got.text;
            bent[n / 2] ^= std::byte{0x10};
            CHECK(run(fast, true, nonce, aad, bent, ragged(n)).tag != got.tag);
            auto bent_aad = aad;
            bent_aad[4] ^= std::byte{1};
            CHECK(run(fast, true, nonce, bent_aad, got.text, ragged(n)).tag != got.tag);
        }
    }
}

TEST_CASE("an x86-64 host with AES-NI seals with libipsec-mb", "[gcm]") {
#if defined(FERRY_HAVE_IPSEC_MB) && defined(__x86_64__)
    auto key = test::byte_pattern(16, 4);
    auto e = gcm_engine::make(GNUTLS_CIPHER_AES_128_GCM, datum(key));
    CHECK(std::string(gcm_engine::fastest_name()) == e.name());
    if (__builtin_cpu_supports("aes"))
        CHECK(std::string(e.name()).starts_with("libipsec-mb"));
    else
        CHECK(std::string(e.name()) == "GnuTLS");
#else
    WARN("built without libipsec-mb: GnuTLS seals");
#endif
}
