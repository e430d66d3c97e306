#include "metrics.hpp"

#include "core/latency_recorder.hpp"

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <vector>

namespace ferry::pagesrv {

namespace {

const char* name_of(daemon_metrics::role r) {
    return r == daemon_metrics::role::source ? "source" : "destination";
}

// The pool node's counters, read at each scrape.
class pool_collectable final : public prometheus::Collectable {
  public:
    explicit pool_collectable(const pool_store& store) : _store(store) {}
    std::vector<prometheus::MetricFamily> Collect() const override {
        const auto c = _store.counters();
        std::vector<prometheus::MetricFamily> out;
        auto counter = [&](const char* name, const char* help, double v) {
            prometheus::MetricFamily f{name, help, prometheus::MetricType::Counter, {}};
            prometheus::ClientMetric m;
            m.counter.value = v;
            f.metric.push_back(m);
            out.push_back(std::move(f));
        };
        counter("ferry_pool_memory_hits_total", "Gets served from the memory arena",
                double(c.memory_hits));
        counter("ferry_pool_disk_hits_total", "Gets served from the disk tier",
                double(c.disk_hits));
        counter("ferry_pool_misses_total", "Gets of chunks this node does not hold",
                double(c.disk_misses));
        counter("ferry_pool_evictions_total", "Chunks moved from memory to disk",
                double(c.evictions));
        counter("ferry_pool_promotions_total", "Chunks moved from disk to memory",
                double(c.promotions));
        counter("ferry_pool_puts_total", "Chunks stored", double(c.puts));
        counter("ferry_pool_corrupt_total", "Stored chunks whose checksum failed on read",
                double(c.corrupt));
        return out;
    }

  private:
    const pool_store& _store;
};

} // namespace

struct daemon_metrics::impl {
    std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
    prometheus::Exposer exposer;
    prometheus::Family<prometheus::Counter>& migrations;
    prometheus::Family<prometheus::Gauge>& in_flight;
    prometheus::Counter& pages;
    prometheus::Counter& bytes;
    prometheus::Histogram& faults;
    std::shared_ptr<pool_collectable> pool;

    explicit impl(const std::string& listen)
        : exposer(listen, 2),
          migrations(prometheus::BuildCounter()
                         .Name("ferry_migrations_total")
                         .Help("Migrations this daemon took part in, by role and outcome")
                         .Register(*registry)),
          in_flight(prometheus::BuildGauge()
                        .Name("ferry_migrations_in_flight")
                        .Help("Migrations in progress, by role")
                        .Register(*registry)),
          pages(prometheus::BuildCounter()
                    .Name("ferry_pages_served_total")
                    .Help("Lazy pages served to destinations (counted as migrations end)")
                    .Register(*registry)
                    .Add({})),
          bytes(prometheus::BuildCounter()
                    .Name("ferry_page_bytes_sent_total")
                    .Help("Bytes of page replies sent (counted as migrations end)")
                    .Register(*registry)
                    .Add({})),
          faults(prometheus::BuildHistogram()
                     .Name("ferry_fault_latency_seconds")
                     .Help("Page fault latency of incoming migrations: fault to page installed")
                     .Register(*registry)
                     .Add({}, bounds())) {}

    static prometheus::Histogram::BucketBoundaries bounds() {
        prometheus::Histogram::BucketBoundaries b;
        for (uint64_t ns : latency_buckets_ns)
            b.push_back(double(ns) / 1e9);
        return b;
    }
};

daemon_metrics::daemon_metrics(const std::string& listen, const pool_store* pool)
    : _impl(std::make_unique<impl>(listen)) {
    _impl->exposer.RegisterCollectable(_impl->registry);
    if (pool) {
        _impl->pool = std::make_shared<pool_collectable>(*pool);
        _impl->exposer.RegisterCollectable(_impl->pool);
    }
}

daemon_metrics::~daemon_metrics() = default;

void daemon_metrics::migration_started(role r) {
    _impl->in_flight.Add({{"role", name_of(r)}}).Increment();
}

void daemon_metrics::migration_ended(role r, bool ok) {
    _impl->in_flight.Add({{"role", name_of(r)}}).Decrement();
    _impl->migrations.Add({{"role", name_of(r)}, {"outcome", ok ? "finished" : "failed"}})
        .Increment();
}

void daemon_metrics::served(uint64_t pages, uint64_t bytes) {
    _impl->pages.Increment(double(pages));
    _impl->bytes.Increment(double(bytes));
}

void daemon_metrics::transfer_finished(const FerryControl__TransferStats& t) {
    constexpr size_t buckets = std::size(latency_buckets_ns) + 1;
    if (t.n_fault_latency_buckets != buckets)
        return; // an older lazy-pages
    std::vector<double> inc(buckets);
    for (size_t i = 0; i < buckets; i++)
        inc[i] = double(t.fault_latency_buckets[i]);
    _impl->faults.ObserveMultiple(inc, double(t.fault_latency_sum_ns) / 1e9);
}

} // namespace ferry::pagesrv
