// A fixed-capacity FIFO of outstanding page requests. A page channel answers
// in order, so the front is always the request the next reply belongs to,
// and the front is also the oldest (for deadlines).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace ferry::lazy {

struct lazy_process;

enum class request_kind : uint8_t { fault, background };

struct outstanding_request {
    uint64_t id = 0;
    lazy_process* proc = nullptr;
    uint64_t addr = 0;     // current address when issued
    uint64_t img_addr = 0; // image address the source reads
    uint32_t nr_pages = 0;
    uint32_t consumed = 0;       // pages already installed or skipped
    uint32_t verified = 0;       // pages whose checksum matched (consumed <= verified)
    uint32_t bad_from = ~0u;     // first page whose checksum failed
    uint64_t fault_addr = ~0ull; // the faulting page, for fault requests
    uint64_t issued_ns = 0;
    uint64_t fault_ns = 0; // when the fault was read; carried over a refetch
    uint8_t attempt = 0;
    request_kind kind = request_kind::fault;
    uint8_t stream = 0; // a background request's stream (fault_state.hpp)
};

template <size_t Capacity>
class request_ring {
  public:
    [[nodiscard]] bool empty() const noexcept { return _size == 0; }
    [[nodiscard]] bool full() const noexcept { return _size == Capacity; }
    [[nodiscard]] static constexpr size_t capacity() noexcept { return Capacity; }
    [[nodiscard]] size_t size() const noexcept { return _size; }
    [[nodiscard]] outstanding_request& front() noexcept { return _slots[_head]; }
    [[nodiscard]] const outstanding_request& front() const noexcept { return _slots[_head]; }

    outstanding_request& push(const outstanding_request& r) noexcept {
        auto& slot = _slots[(_head + _size) % Capacity];
        slot = r;
        _size++;
        return slot;
    }
    void pop() noexcept {
        _head = (_head + 1) % Capacity;
        _size--;
    }
    template <typename F>
    void for_each(F&& f) noexcept {
        for (size_t i = 0; i < _size; i++)
            f(_slots[(_head + i) % Capacity]);
    }

  private:
    std::array<outstanding_request, Capacity> _slots{};
    size_t _head = 0;
    size_t _size = 0;
};

} // namespace ferry::lazy
