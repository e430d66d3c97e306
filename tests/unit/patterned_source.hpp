// A page source for tests of the source side: `pages` lazy pages of image
// pid 1 from `base`, every 8 bytes of a page holding its address (as a
// frozen task's would be read), with what was sent counted.
#pragma once

#include "core/checksum.hpp"
#include "core/page.hpp"
#include "transport/page_source.hpp"

#include <atomic>
#include <cstring>
#include <string>

namespace ferry::test {

class patterned_source final : public transport::page_source {
  public:
    patterned_source(uint64_t base, uint64_t pages) {
        _index.add(1, base, base + pages * page_size);
    }
    const std::string& id() const noexcept override { return _id; }
    const criu::lazy_page_index& lazy_pages() const noexcept override { return _index; }
    wire::status read_pages(const wire::page_request& r, std::byte* out,
                            uint64_t* checksums) override {
        for (uint32_t i = 0; i < r.nr_pages; i++) {
            const uint64_t addr = r.vaddr + uint64_t(i) * page_size;
            std::byte* p = out + size_t(i) * page_size;
            for (size_t off = 0; off < page_size; off += sizeof addr)
                std::memcpy(p + off, &addr, sizeof addr);
            checksums[i] = page_checksum(p);
        }
        return wire::status::ok;
    }
    void count_sent(uint64_t n, uint64_t bytes) noexcept override {
        sent += n;
        sent_bytes += bytes;
    }
    void count_cpu(uint64_t ns) noexcept override { cpu_ns += ns; }
    void destination_done() override { done = true; }
    void destination_discarded() override { discarded = true; }
    std::atomic<uint64_t> cpu_ns{0};     // serving threads' CPU, as they report it
    std::atomic<uint64_t> sent{0};       // pages
    std::atomic<uint64_t> sent_bytes{0}; // as the source counts them
    std::atomic<bool> done{false};
    std::atomic<bool> discarded{false};

  private:
    std::string _id = "patterned-source";
    criu::lazy_page_index _index;
};

} // namespace ferry::test
