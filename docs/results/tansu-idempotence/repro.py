"""Does the durable Tansu (S3 engine on SeaweedFS) keep every acknowledged record across kill -9 + restart?

    python3 docs/results/tansu-idempotence/repro.py idem|plain TRIALS

Per trial: a fresh 4-partition topic; a producer (acks=all; idempotent or not) sends 3000 records in flushed
bursts of 100; the broker is SIGKILLed 0.3-1.0 s in, kept down 3 s and restarted on the same port and storage;
the producer carries on. A fresh consumer then reads the topic. LOST = acknowledged but not there; "lost acked
before kill" = how many of those were acknowledged before the kill; the third figure of each result = how many
DUPLICATE_SEQUENCE_NUMBER answers kafka-python's sender logged (it counts them as delivered).
"""
import logging
import os
import random
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from streamer.dev import local_services as ls

if len(sys.argv) < 3 or sys.argv[1] not in ("idem", "plain"):
    raise SystemExit(f"usage: {sys.argv[0]} idem|plain TRIALS")
idem = sys.argv[1] == "idem"
class Dup(logging.Handler):
    n = 0
    def emit(self, r):
        if "DUPLICATE_SEQUENCE" in r.getMessage(): Dup.n += 1
h = Dup(); lg = logging.getLogger("kafka.producer.sender"); lg.setLevel(logging.DEBUG); lg.addHandler(h); lg.propagate = False
trials = int(sys.argv[2])
d = Path(tempfile.mkdtemp())
s3 = ls.Service("s3", ls.free_port(), d / "s3").start(60)
k = ls.Service("kafka", ls.free_port(), d / "k", s3_endpoint=s3.url).start()
print("up", s3.url, k.url, flush=True)
N = 3000
results = []
for t in range(trials):
    topic = f"t{t}-{random.randrange(10**6)}"
    a = KafkaAdminClient(bootstrap_servers=k.url); a.create_topics([NewTopic(topic, 4, 1)]); a.close()
    p = KafkaProducer(bootstrap_servers=k.url, acks="all", enable_idempotence=idem, retries=2**31 if idem else 50,
                      linger_ms=5, reconnect_backoff_max_ms=500)
    acked, errs, when = set(), [], {}
    lock = threading.Lock()
    def cb(i):
        def ok(md):
            with lock: acked.add(i); when[i] = time.monotonic()
        return ok
    def sender():
        for i in range(0, N, 100):
            for j in range(i, i + 100):
                p.send(topic, key=str(j % 7).encode(), value=str(j).encode()).add_callback(cb(j)).add_errback(lambda e: errs.append(repr(e)))
            p.flush(timeout=60)
            time.sleep(0.02)
    th = threading.Thread(target=sender); th.start()
    time.sleep(random.uniform(0.3, 1.0))
    with lock: at_kill = len(acked)
    t_kill = time.monotonic(); os.kill(k.pid(), signal.SIGKILL)
    time.sleep(3)
    k.start()
    th.join(180)
    p.close(timeout=30)
    c = KafkaConsumer(bootstrap_servers=k.url, auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=5000)
    tps = [TopicPartition(topic, i) for i in range(4)]
    c.assign(tps); c.seek_to_beginning(*tps)
    got = [int(m.value) for m in c]
    c.close()
    lost = acked - set(got)
    dup = len(got) - len(set(got))
    before = sum(1 for i in lost if when[i] < t_kill)
    results.append((len(lost), before, Dup.n)); Dup.n = 0
    print(f"trial {t}: acked at kill {at_kill}, acked {len(acked)}, read {len(got)} (distinct {len(set(got))}), "
          f"LOST {len(lost)} {sorted(lost)[:5]}..., dups {dup}, lost acked before kill {before}, errors {len(errs)} {errs[:1]}", flush=True)
k.stop(); s3.stop()
print("lost per trial", results)
