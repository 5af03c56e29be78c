// gRPC edge of ingestion: one reactor per stream reads batches, applies them
// through an IngestSession and writes acks. Reactions never block on I/O:
// the next read starts as soon as a batch is applied; acks coalesce while a
// write is in flight.
#ifndef TORCHMON_SERVER_SERVICE_INGEST_SERVICE_H_
#define TORCHMON_SERVER_SERVICE_INGEST_SERVICE_H_

#include "server/core/aggregator.h"
#include "server/core/event_log.h"
#include "server/service/broadcaster.h"
#include "server/service/daemon_stats.h"
#include "torchmon/v1/torchmon.grpc.pb.h"

namespace torchmon::server {

// Thread-safe; outlives every stream it serves (the gRPC server is shut down
// before it is destroyed).
class IngestService final : public v1::Ingest::CallbackService {
 public:
  IngestService(Aggregator& aggregator, EventLog& events, DaemonStats& stats,
                Broadcaster<EventRecord>& events_out);

  grpc::ServerBidiReactor<v1::IngestBatch, v1::IngestAck>* Stream(
      grpc::CallbackServerContext* context) override;

 private:
  Aggregator& aggregator_;
  EventLog& events_;
  DaemonStats& stats_;
  Broadcaster<EventRecord>& events_out_;
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_SERVICE_INGEST_SERVICE_H_
