// Writes the seed corpus of the fuzz targets: tests/fuzz/corpus/<target>/.
//
//   make_seed_corpus <dir>    writes <dir>/<target>/* for ingest, selector, cgroup and web_config
//
// Seeds are what real clients and users send (a training process's stream,
// two ranks, torchmonctl command lines) plus the edge cases the daemon must
// refuse or count; libFuzzer mutates from there. The committed files are
// this program's output: change a seed here, rerun it, commit both. Inputs
// libFuzzer found (crashes once fixed, or ones worth keeping) go to the
// corpus directory under their own names; this program never deletes.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include <sys/stat.h>

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/ingest_script.h"
#include "torchmon/v1/torchmon.pb.h"

namespace torchmon::fuzz {
namespace {

constexpr int64_t kT0Us = kIngestStartMs * 1000;

// Map fields in a fixed order, so that the seeds are the same bytes on every
// run (check_seed_corpus.sh compares them).
std::string Serialize(const google::protobuf::MessageLite& message) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    message.SerializeToCodedStream(&coded);
  }
  return out;
}

class Script {
 public:
  Script& Batch(int stream, const v1::IngestBatch& batch) {
    AppendStep(text_, stream == 0 ? kBatchOnStream0 : kBatchOnStream1, Serialize(batch));
    return *this;
  }
  Script& Tick(uint32_t ms) { return Op(kTick, U32Argument(ms)); }
  Script& Expire(uint32_t ms) { return Op(kExpire, U32Argument(ms)); }
  Script& Scrape(const v1::Selector& selector = v1::Selector()) {
    return Op(kScrape, Serialize(selector));
  }
  Script& CloseAll() { return Op(kCloseAll, ""); }
  Script& Reconnect(int stream) { return Op(kReconnect, std::string(1, static_cast<char>(stream))); }
  Script& ManyStats(int stream, uint16_t count, uint32_t first_id) {
    std::string argument(1, static_cast<char>(stream));
    argument += U32Argument(count).substr(0, 2);
    argument += U32Argument(first_id);
    return Op(kManyStats, argument);
  }
  const std::string& text() const { return text_; }

 private:
  Script& Op(IngestOp op, const std::string& argument) {
    AppendStep(text_, op, argument);
    return *this;
  }
  std::string text_;
};

void Hello(v1::IngestBatch& b, std::vector<std::pair<std::string, std::string>> labels) {
  for (const auto& [k, v] : labels) (*b.mutable_hello()->mutable_labels())[k] = v;
  b.mutable_hello()->set_client_name("torchmon-cpp/0.1 pid=4242");
}

v1::StatDefinition* Define(v1::IngestBatch& b, uint32_t id, const std::string& name,
                           std::vector<v1::Aggregation> aggregations, int64_t window_ms,
                           int64_t max_samples = 0,
                           std::vector<std::pair<std::string, std::string>> labels = {}) {
  v1::StatDefinition* d = b.add_definitions();
  d->set_id(id);
  d->set_name(name);
  for (v1::Aggregation a : aggregations) d->mutable_spec()->add_aggregations(a);
  d->mutable_spec()->set_window_size_ms(window_ms);
  d->mutable_spec()->set_max_samples(max_samples);
  for (const auto& [k, v] : labels) (*d->mutable_labels())[k] = v;
  return d;
}

void Samples(v1::IngestBatch& b, uint32_t id, int64_t base_us, std::vector<double> values,
             std::vector<int64_t> deltas_us = {}) {
  v1::SampleBlock* block = b.add_samples();
  block->set_stat_id(id);
  block->set_base_time_us(base_us);
  for (double v : values) block->add_values(v);
  for (int64_t d : deltas_us) block->add_time_deltas_us(d);
}

void Drops(v1::IngestBatch& b, uint32_t id, uint64_t n) {
  v1::DropReport* d = b.add_drops();
  d->set_stat_id(id);
  d->set_dropped(n);
}

v1::Event* Event(v1::IngestBatch& b, const std::string& name, int64_t t_us) {
  v1::Event* e = b.add_events();
  e->set_name(name);
  e->set_timestamp_us(t_us);
  return e;
}

v1::IngestBatch Seq(uint64_t sequence) {
  v1::IngestBatch b;
  b.set_sequence(sequence);
  return b;
}

const std::vector<std::pair<std::string, std::string>> kRank0 = {
    {"job", "llm-7b"}, {"rank", "0"}, {"local_rank", "0"}, {"host", "gpu-node-01"}};
const std::vector<std::pair<std::string, std::string>> kRank1 = {
    {"job", "llm-7b"}, {"rank", "1"}, {"local_rank", "1"}, {"host", "gpu-node-01"}};

// A training process: hello, its stats, a few send cycles, an event.
std::string TrainingStream() {
  Script s;
  v1::IngestBatch b = Seq(1);
  Hello(b, kRank0);
  Define(b, 1, "train.loss", {v1::MEAN, v1::MAX, v1::MIN}, 1000);
  Define(b, 2, "train.step_time_ms", {v1::MEAN, v1::COUNT}, 1000, /*max_samples=*/5);
  Define(b, 3, "train.lr", {v1::VALUE}, 10'000);
  Define(b, 4, "grad_norm", {v1::SUM, v1::MAX}, 500, 0, {{"layer", "attn.0"}});
  Samples(b, 1, kT0Us + 1000, {2.31, 2.29, 2.30}, {0, 100'000, 100'000});
  Samples(b, 2, kT0Us + 2000, {21.5, 22.0, 20.9, 21.1, 23.4, 22.2, 21.0}, {0, 1, 1, 1, 1, 1, 1});
  Samples(b, 3, kT0Us, {3e-4});
  Samples(b, 4, kT0Us + 10, {0.5, 1.5}, {0, 600'000});
  v1::Event* e = Event(b, "epoch_end", kT0Us + 5000);
  (*e->mutable_data())["epoch"].set_int_value(3);
  (*e->mutable_data())["loss"].set_double_value(2.3);
  (*e->mutable_data())["checkpoint"].set_string_value("s3://bucket/ckpt-3");
  (*e->mutable_data())["best"].set_bool_value(true);
  s.Batch(0, b);
  v1::IngestBatch b2 = Seq(2);
  Samples(b2, 1, kT0Us + 400'000, {2.28, std::nan(""), 2.27}, {0, 50'000, 50'000});
  Samples(b2, 2, kT0Us + 500'000, {19.9});
  Drops(b2, 1, 7);
  s.Batch(0, b2);
  s.Tick(3500).Scrape();
  v1::IngestBatch b3 = Seq(3);
  Samples(b3, 1, kT0Us + 3'600'000, {2.2, 2.1});
  Samples(b3, 4, kT0Us + 3'600'000, {0.25});
  s.Batch(0, b3);
  s.Tick(2000).Scrape().CloseAll().Scrape();
  return s.text();
}

// Two ranks on one daemon; rank 1 also defines a stat rank 0 has, then
// refines a shared one (no identity labels on stream 1) inconsistently.
std::string TwoRanks() {
  Script s;
  v1::IngestBatch a = Seq(1);
  Hello(a, kRank0);
  Define(a, 1, "train.loss", {v1::MEAN}, 1000);
  Samples(a, 1, kT0Us + 100, {1.0, 2.0}, {0, 10});
  s.Batch(0, a);
  v1::IngestBatch b = Seq(1);
  Hello(b, kRank1);
  Define(b, 1, "train.loss", {v1::MEAN}, 1000);
  Define(b, 2, "shared", {v1::SUM}, 1000);
  Samples(b, 1, kT0Us + 200, {3.0});
  Samples(b, 2, kT0Us + 200, {1.0});
  s.Batch(1, b);
  s.Reconnect(1);
  v1::IngestBatch c = Seq(1);
  Define(c, 9, "shared", {v1::SUM}, 1000, 0, kRank1);
  Define(c, 10, "shared", {v1::MAX}, 2000, 0, kRank1);  // conflicts with stream 1's first
  Samples(c, 9, kT0Us + 300, {5.0});
  Samples(c, 10, kT0Us + 300, {6.0});
  Drops(c, 10, 2);
  s.Batch(1, c);
  s.Tick(1000).Tick(2500).Scrape();
  return s.text();
}

// Every way a sample is counted but not accepted, and odd values.
std::string CountedNotAccepted() {
  Script s;
  v1::IngestBatch b = Seq(5);
  Hello(b, kRank0);
  Define(b, 1, "capped", {v1::COUNT, v1::SUM}, 100, /*max_samples=*/2);
  Define(b, 2, "odd.values", {v1::VALUE, v1::MEAN, v1::MIN, v1::MAX}, 10);
  Samples(b, 1, kT0Us, {1, 2, 3, 4, 5});
  // Late (an hour ago), skewed (an hour ahead), before 1970, far future.
  Samples(b, 2, kT0Us, {1, 2, 3, 4}, {-3'600'000'000LL, 7'200'000'000LL, -kT0Us * 2, 0});
  Samples(b, 2, std::numeric_limits<int64_t>::max(), {7});
  Samples(b, 2, std::numeric_limits<int64_t>::min(), {8}, {-1});
  Samples(b, 2, kT0Us + 1,
          {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
           std::nan(""), -0.0, 1e308, 1e308, std::numeric_limits<double>::denorm_min()});
  s.Batch(0, b);
  v1::IngestBatch older = Seq(3);  // sequence going back
  Samples(older, 1, kT0Us, {9});
  s.Batch(0, older);
  s.Tick(2200).Scrape();
  v1::IngestBatch late = Seq(6);
  Samples(late, 1, kT0Us, {10});  // its window has closed now
  Drops(late, 2, std::numeric_limits<uint64_t>::max());
  s.Batch(0, late).Scrape().CloseAll();
  return s.text();
}

// A series forgotten after the TTL while the stream still uses its id.
std::string ExpiryWhileStreaming() {
  Script s;
  v1::IngestBatch b = Seq(1);
  Hello(b, kRank0);
  Define(b, 1, "train.loss", {v1::MEAN}, 1000);
  Define(b, 2, "idle", {v1::MEAN}, 1000);
  Samples(b, 1, kT0Us, {1});
  s.Batch(0, b);
  s.Tick(3000).Expire(11'000).Expire(1000).Scrape();
  v1::IngestBatch again = Seq(2);
  Samples(again, 1, kT0Us + 14'000'000, {2});
  Drops(again, 2, 3);
  s.Batch(0, again).Tick(3000).Scrape().CloseAll();
  return s.text();
}

// A stat made again with another spec once the old Stat is gone: in the
// batch that releases the old one (the new definition waits for it), after
// a stream's end, while another stream holds it (refused), and a wait that
// runs out (two Stats alive on one stream).
std::string Redefinitions() {
  Script s;
  v1::IngestBatch first = Seq(1);
  Hello(first, kRank0);
  Define(first, 1, "asdf", {v1::SUM, v1::COUNT}, 10);
  Samples(first, 1, kT0Us, {2, 3, 3});
  s.Batch(0, first);
  v1::IngestBatch second = Seq(2);
  Define(second, 2, "asdf", {v1::SUM, v1::COUNT}, 360'000'000, 3)->set_after_release(true);
  Samples(second, 1, kT0Us + 5000, {3});
  Samples(second, 2, kT0Us + 20'000, {1, 2, 3, 4});
  second.add_released(1);
  s.Batch(0, second).Tick(100).Scrape();
  v1::IngestBatch other = Seq(1);
  Hello(other, kRank0);
  Define(other, 7, "asdf", {v1::MAX}, 1000)->set_after_release(true);
  Samples(other, 7, kT0Us + 30'000, {9});
  s.Batch(1, other);
  v1::IngestBatch alive = Seq(3);
  Define(alive, 3, "asdf", {v1::MIN}, 1000)->set_after_release(true);
  Samples(alive, 3, kT0Us + 40'000, {5});
  s.Batch(0, alive).Tick(11'000);
  v1::IngestBatch later = Seq(4);
  Samples(later, 3, kT0Us + 11'050'000, {6});
  later.add_released(2);
  later.add_released(1);
  s.Batch(0, later).Reconnect(0).Tick(3000).Scrape().CloseAll();
  return s.text();
}

// What a daemon must refuse, each named in the ack.
std::string Refusals() {
  Script s;
  v1::IngestBatch b = Seq(1);
  Hello(b, {{"rank", "0"}});
  Define(b, 0, "id.zero", {v1::MEAN}, 1000);
  Define(b, 1, "", {v1::MEAN}, 1000);
  Define(b, 2, "good", {v1::MEAN}, 1000);  // a second id for the series of id 10
  Define(b, 3, "no.aggregations", {}, 1000);
  Define(b, 4, "tiny.window", {v1::MEAN}, 1);
  Define(b, 5, "huge.window", {v1::MEAN}, 86'400'001);
  Define(b, 6, "negative.cap", {v1::MEAN}, 1000, -1);
  Define(b, 7, "reserved.label", {v1::MEAN}, 1000, 0, {{"stat", "x"}});
  Define(b, 8, "identity.clash", {v1::MEAN}, 1000, 0, {{"rank", "1"}});
  Define(b, 9, "bad.label.key", {v1::MEAN}, 1000, 0, {{"1abc", "x"}, {"__x", "y"}});
  Define(b, 10, "good", {v1::MEAN}, 1000);
  Define(b, 10, "rebound", {v1::MEAN}, 1000);
  Define(b, 10, "good", {v1::MAX}, 1000);
  b.mutable_definitions(3)->mutable_spec()->add_aggregations(static_cast<v1::Aggregation>(99));
  for (uint32_t id : {0u, 3u, 10u, 11u}) Samples(b, id, kT0Us, {1});
  Samples(b, 10, kT0Us, {1, 2, 3}, {1, 2});  // deltas do not match values
  Drops(b, 11, 5);
  Event(b, "", kT0Us);
  v1::Event* e = Event(b, "no.value", kT0Us);
  (*e->mutable_data())["x"];
  v1::Event* f = Event(b, "bad.labels", kT0Us);
  (*f->mutable_labels())["rank"] = "2";
  s.Batch(0, b);
  v1::IngestBatch late_hello = Seq(2);
  Hello(late_hello, kRank1);
  s.Batch(0, late_hello).Scrape();
  return s.text();
}

// Names and labels the exposition must escape.
std::string Escaping() {
  Script s;
  v1::IngestBatch b = Seq(1);
  Hello(b, {{"host", "a\"b\\c\nd"}, {"job", ""}});
  Define(b, 1, "quote\"back\\slash\nnewline", {v1::VALUE}, 1000);
  Define(b, 2, "ünïcödé.名前", {v1::MEAN}, 1000, 0, {{"field_", "}{,="}});
  Define(b, 3, "train.*?", {v1::SUM}, 1000);
  for (uint32_t id : {1u, 2u, 3u}) Samples(b, id, kT0Us, {1.5});
  v1::Event* e = Event(b, "ev\"ent\n", kT0Us);
  (*e->mutable_data())["we\\ird\"field\n"].set_double_value(1e-300);
  (*e->mutable_data())["flag"].set_bool_value(false);
  s.Batch(0, b).Tick(3000);
  v1::Selector sel;
  sel.set_stat("*\"*");
  s.Scrape(sel);
  return s.text();
}

// A process with many stats (ids 1..300), and ids far apart.
std::string ManyStats() {
  Script s;
  v1::IngestBatch b = Seq(1);
  Hello(b, kRank0);
  for (uint32_t id = 1; id <= 300; ++id) {
    Define(b, id, "layer." + std::to_string(id) + ".grad_norm", {v1::MAX}, 1000);
  }
  for (uint32_t id = 1; id <= 300; id += 7) Samples(b, id, kT0Us + id, {static_cast<double>(id)});
  s.Batch(0, b);
  v1::IngestBatch sparse = Seq(2);
  for (uint32_t id : {70'000u, 4'294'967'295u, 2048u}) {
    Define(sparse, id, "sparse." + std::to_string(id), {v1::COUNT}, 1000);
    Samples(sparse, id, kT0Us, {1, 2});
  }
  s.Batch(0, sparse).Tick(2500).Scrape();
  return s.text();
}

// The same with the kManyStats shorthand, on both streams.
std::string ManyStatsShorthand() {
  Script s;
  s.ManyStats(0, 50, 1).ManyStats(1, 20, 100).ManyStats(0, 10, 4'294'967'290u);
  s.Tick(2500).Scrape().Expire(12'000);
  return s.text();
}

// --- selector seeds (selector_fuzzer.cc: first byte is the mode) ---

std::string CommandLine(std::vector<std::string> args) {
  std::string out(1, '\0');
  for (size_t i = 0; i < args.size(); ++i) {
    if (i > 0) out.push_back('\0');
    out += args[i];
  }
  return out;
}

std::string SelectorProto(const v1::Selector& selector) {
  return std::string(1, '\1') + Serialize(selector);
}

v1::Selector MakeSelector(const std::string& stat,
                          std::vector<std::tuple<std::string, std::string, v1::MatchOp>> labels) {
  v1::Selector s;
  s.set_stat(stat);
  for (const auto& [k, v, op] : labels) {
    v1::LabelMatcher* m = s.add_labels();
    m->set_key(k);
    m->set_value(v);
    m->set_op(op);
  }
  return s;
}

std::string Glob(const std::string& pattern, const std::string& text) {
  return std::string(1, '\2') + pattern + std::string(1, '\0') + text;
}

std::string TextForm(const std::string& text) { return std::string(1, '\3') + text; }

// --- cgroup seeds (cgroup_fuzzer.cc: a /proc/<pid>/cgroup file) ---

constexpr char kPodUid[] = "6b2c0b9e_8d7f_4c2a_9a51_5c1d2e3f4a5b";
constexpr char kContainerId[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

std::string PodScope(const std::string& qos) {
  return "/kubepods.slice/kubepods-" + qos + ".slice/kubepods-" + qos + "-pod" + kPodUid +
         ".slice/cri-containerd-" + kContainerId + ".scope";
}

bool WriteFile(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
  return static_cast<bool>(out);
}

bool MakeDir(const std::string& path) { return mkdir(path.c_str(), 0755) == 0 || errno == EEXIST; }

}  // namespace
}  // namespace torchmon::fuzz

int main(int argc, char** argv) {
  using namespace torchmon::fuzz;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
    return 2;
  }
  const std::string root = argv[1];
  const std::vector<std::pair<std::string, std::string>> ingest = {
      {"training_stream", TrainingStream()},
      {"two_ranks", TwoRanks()},
      {"counted_not_accepted", CountedNotAccepted()},
      {"expiry_while_streaming", ExpiryWhileStreaming()},
      {"refusals", Refusals()},
      {"redefinitions", Redefinitions()},
      {"escaping", Escaping()},
      {"many_stats", ManyStats()},
      {"many_stats_shorthand", ManyStatsShorthand()},
  };
  using torchmon::v1::EQUAL;
  using torchmon::v1::GLOB;
  using torchmon::v1::NOT_EQUAL;
  const std::vector<std::pair<std::string, std::string>> selector = {
      {"cli_series", CommandLine({"series", "--stat", "train.*", "--label", "rank=0"})},
      {"cli_windows", CommandLine({"--json", "windows", "train.loss", "--label", "rank=1",
                                   "--last", "5", "--since=10m"})},
      {"cli_events", CommandLine({"events", "epoch_*", "--label", "job = j ", "--last=3"})},
      {"cli_watch", CommandLine({"--target", "/run/torchmon/torchmond.sock", "watch", "a?b"})},
      {"cli_push", CommandLine({"push", "train.loss", "1", "-2.5", "nan", "-inf", "1e-3", "--agg",
                                "mean,MAX", "--window", "500ms", "--max-samples", "10",
                                "--label", "phase=warmup", "--timeout", "2s"})},
      {"cli_event", CommandLine({"event", "epoch_end", "epoch=3", "loss=0.5", "best=true",
                                 "note=hello world", "big=99999999999999999999", "--", "-x=1"})},
      {"cli_help", CommandLine({"push", "--help"})},
      {"proto_full", SelectorProto(MakeSelector(
                         "train.*", {{"rank", "0", EQUAL}, {"host", "n*", GLOB},
                                     {"job", "", NOT_EQUAL}}))},
      {"proto_empty", SelectorProto(MakeSelector("", {}))},
      {"proto_literal_glob", SelectorProto(MakeSelector("a?b", {{"job", "j?", EQUAL}}))},
      {"proto_unknown_op", SelectorProto(MakeSelector(
                               "*", {{"local_rank", "ä", static_cast<torchmon::v1::MatchOp>(7)}}))},
      {"glob_backtrack", Glob("a*b*c", "axxbyybzzc")},
      {"glob_stars", Glob("**a**?", "bab")},
      {"glob_empty", Glob("", "")},
      {"glob_utf8", Glob("?", "ü")},
      {"text_labels", TextForm("job=llm, rank=0,rank=1")},
      {"text_duration", TextForm("1.5s")},
      {"text_aggregations", TextForm("mean, MAX,value")},
      {"text_value", TextForm("-Infinity")},
  };
  const std::string user = "/user.slice/user-1000.slice/user@1000.service/app.slice";
  const std::vector<std::pair<std::string, std::string>> cgroup = {
      {"slurm_v2", "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n"},
      {"slurm_v1", "12:pids:/slurm/uid_1000/job_7/step_batch/task_1\n"
                   "1:name=systemd:/system.slice/slurmd.service\n0::/\n"},
      {"pod_systemd", "0::" + PodScope("burstable") + "\n"},
      {"pod_cgroupfs", std::string("4:memory:/kubepods/besteffort/pod") +
                           "6b2c0b9e-8d7f-4c2a-9a51-5c1d2e3f4a5b/" + kContainerId + "\n"},
      {"namespaced_pod", "0::/../../../kubepods-besteffort.slice/kubepods-besteffort-pod" +
                             std::string(kPodUid) + ".slice\n"},
      {"forged_slurm", "0::" + user + "/system.slice/x-slurmstepd.scope/job_42/step_0\n"},
      {"forged_pod", "0::" + user + PodScope("besteffort") + "\n"},
      {"user_unit", "0::" + user + "/run-r4f2.scope\n"},
  };
  const std::string hash = "$2b$04$zuGHkdPzwb9KCcf8rLNc5eFPSsX10hv.UMzE2ki0Zd/edgTbfr3.a";
  const std::vector<std::pair<std::string, std::string>> web_config = {
      {"toolkit_example",
       "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
       "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n"
       "  min_version: TLS12\n  max_version: TLS13\n"
       "basic_auth_users:\n  prometheus: " + hash + "\n"},
      {"quoting", "\xEF\xBB\xBF---\ntls_server_config:\n  cert_file:\t'it''s # x.crt'  # c\n"
                  "  key_file: \"k \\\"2\\\".key\"\n"
                  "basic_auth_users:\n  'grafana':\t\"" + hash + "\"\n...\n"},
      {"crlf_empty", "# nothing\r\ntls_server_config: {}\r\nbasic_auth_users:\r\n"
                     "http_server_config: ~\r\n"},
      {"refused", "tls_server_config:\n  cert_file: a\n  key_file: b\n  cipher_suites: x\n"
                  "basic_auth_users:\n  u: hunter2\n"},
      // A "hash" that is a piece of the refusal's own wording (found by
      // the fuzzer): the message holds it without quoting it back.
      {"wording", "basic_auth_users:\n  prometheus: $\" (make one with `ht\n"},
  };
  bool ok = MakeDir(root) && MakeDir(root + "/ingest") && MakeDir(root + "/selector") &&
            MakeDir(root + "/cgroup") && MakeDir(root + "/web_config");
  for (const auto& [name, content] : web_config) {
    ok = ok && WriteFile(root + "/web_config/" + name, content);
  }
  for (const auto& [name, content] : cgroup) ok = ok && WriteFile(root + "/cgroup/" + name, content);
  for (const auto& [name, content] : ingest) ok = ok && WriteFile(root + "/ingest/" + name, content);
  for (const auto& [name, content] : selector) {
    ok = ok && WriteFile(root + "/selector/" + name, content);
  }
  if (!ok) {
    std::fprintf(stderr, "cannot write the corpus under %s: %s\n", root.c_str(), std::strerror(errno));
    return 1;
  }
  return 0;
}
