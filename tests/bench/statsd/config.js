/*
 * StatsD 0.9.0 configuration for tests/bench/statsd_compare.sh.
 * StatsD eval()s this file, so the ports come from the environment that the
 * comparison sets for each fresh StatsD: loopback only, console backend
 * (StatsD's stock debugging backend; its printed counters are how the bench
 * counts what StatsD received), flush every second like a production setup
 * that ships to Graphite every 1-10 s.
 */
{
  address: "127.0.0.1",
  port: Number(process.env.STATSD_BENCH_UDP_PORT),
  mgmt_address: "127.0.0.1",
  mgmt_port: Number(process.env.STATSD_BENCH_MGMT_PORT),
  flushInterval: Number(process.env.STATSD_BENCH_FLUSH_MS || 1000),
  backends: ["./backends/console"],
  automaticConfigReload: false
}
