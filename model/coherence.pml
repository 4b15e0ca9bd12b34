/* Spin model of the cxlkv slot protocol in coherence=software mode
 * (docs/coherence.md, layout version 4): per-host caches of lines over
 * non-coherent shared memory (cache.pml), flush and invalidate, lines written
 * back whole at any moment, no atomic read-modify-write at all. What is
 * modelled, the abstractions, bounds and results: docs/model.md, "Software
 * mode".
 *
 * One write partition (partition 0) and three hosts, one process each:
 *  - P0 (host 0): the partition's first owner (incarnation 1). OPS0
 *    (default OPS) operations, each a Store into its partition or a Load
 *    of one of NK keys.
 *    It may crash at any step (CRASHES=1), or be paused at any step: the
 *    lease on partition 0 moves on while it runs (PAUSES=1) and it resumes as
 *    a zombie that continues its old steps. Its host's cache keeps writing
 *    its dirty lines back either way.
 *  - P1 (host 1): a reader on another host: OPS1 (default OPS) Loads, then
 *    the end probe.
 *  - R (host 2): the process that the lease gives partition 0 next
 *    (incarnation 2) once P0 crashed or was paused; before that it may load
 *    (RLOADS) as a reader. At the end it settles and probes the partition.
 *  - one Cache process per host (cache.pml).
 *
 * The default is the code as written (layout version 4, src/region/software.cc).
 * Variants (-D flags):
 *  V3_PROTOCOL   layout version 3 as v0.1.0 shipped it: no incarnation in
 *                the slot word or its CRC, readers do not re-read the
 *                registry record, the attach sweep keeps READY blocks and
 *                reads without invalidating, no periodic sweep.
 *  HB_IN_REC     the default protocol, but with the heartbeat stored in the
 *                registry record's line (ParticipantRecord as in layout v3).
 *  DROP=n        site n's flush or invalidate removed (the mutants).
 *  CHECK_READS_ONLY  only the read properties.
 *  CLEAN_DROPS   caches also drop clean lines at any moment (cache.pml;
 *                DROP_HOSTS=mask: only the caches of those hosts, bit h
 *                for host h; default 7, all three).
 *
 * Every step names the failpoint (`@fp`) or function (`@fn`) of src/region/
 * it stands for; scripts/check-model-names.sh checks that each exists.
 */

#ifndef NSLOT
#define NSLOT 1
#endif
#ifndef NK
#define NK 2
#endif
#ifndef OPS
#define OPS 1
#endif
#ifndef OPS0
#define OPS0 OPS
#endif
#ifndef OPS1
#define OPS1 OPS
#endif
#ifndef RLOADS
#define RLOADS 1
#endif
#ifndef CRASHES
#define CRASHES 1
#endif
#ifndef PAUSES
#define PAUSES 1
#endif

#define P0 0
#define P1 1
#define R 2
#define NH 3
#define NONE 255

/* Words (indexes into mem[]) and their lines. */
#define A_REC 0                    /* registry record 0: incarnation, state */
#define A_HB 1                     /* its heartbeat */
#define A_TAG(s) (2 + (s))         /* the set's tag line, one tag per way */
#define A_ST(s) (2 + NSLOT + 3 * (s))  /* slot s's SlotMeta line: state word, */
#define A_KEY(s) (A_ST(s) + 1)     /*   key (key, ns, len: one word here), */
#define A_CRC(s) (A_ST(s) + 2)     /*   CRC */
#define A_DATA(s) (2 + 4 * NSLOT + (s))  /* slot s's payload */
#define NW (2 + 5 * NSLOT)
#define L_REC 0
#define L_HB 1
#define L_TAG 2
#define L_META(s) (3 + (s))
#define L_DATA(s) (3 + NSLOT + (s))
#define NL (3 + 2 * NSLOT)

/* Flush and invalidate sites (DROP=n removes site n). */
#define S_SW3_META 1    /* Store SW3: WRITING + key reach memory before the payload */
#define S_SW3_TAG 2     /* Store SW3: the tag */
#define S_SW4_DATA 3    /* Store SW4: the payload before READY */
#define S_SW5_META 4    /* Store SW5: crc + READY */
#define S_CHECK_REC 5   /* Store: the fence check before the commit reads the record */
#define S_SR1_TAG 6     /* Load SR1: the tag line */
#define S_SR1_META 7    /* Load SR1: the meta line */
#define S_SR2_DATA 8    /* Load SR2: the payload */
#define S_SR3_META 9    /* Load SR3: the meta line again */
#define S_SR3_REC 10    /* Load: the record after the copy (incarnation check) */
#define S_ADOPT_REC 11  /* attach: the new incarnation's record (SwStillOwner's invalidate) */
#define S_SWEEP_INV 12  /* attach/owner sweep: this host's stale copies of the meta lines */
#define S_SWEEP_META 13 /* attach/owner sweep: a freed slot's meta line */
/* The sweep does not flush the freed slot's tag line (nor does the code):
 * a tag is a hint, a reader that follows a stale tag finds the slot FREE;
 * with the flush, Spin finds the same (docs/model.md). */

#include "cache.pml"

/* Slot state word: state, generation, incarnation of the writer. */
#define FREE 0
#define WRITING 1
#define READY 2
#ifdef V3_PROTOCOL
#define W(inc, g, st) ((st) + 4 * (g))  /* v3: [gen][owner p][state], no incarnation */
#else
#define W(inc, g, st) ((st) + 4 * (g) + 64 * (inc))
#endif
#define WST(w) ((w) % 4)
#define WGEN(w) (((w) / 4) % 16)
#define WINC(w) ((w) / 64)
/* Registry record word: incarnation, ACTIVE. */
#define REC(inc) ((inc) * 4 + 1)

/* "Bytes" are a token (writer, slot, generation, key): equal only if they
 * are the same writer's copy for the same lease. 0 = bytes nobody wrote. */
#define TOK(w, s, g, k) (((((w) / 2) * NSLOT + (s)) * 16 + (g)) * 4 + (k))
#define TOKW(t) ((((t) / 64) / NSLOT) * 2)
#define TOKS(t) (((t) / 64) % NSLOT)
#define TOKG(t) (((t) / 4) % 16)
#define TOKK(t) ((t) % 4)
/* The bound CRC as a value without collisions: the payload's token and the
 * trailer (generation, key and, in v4, the writer's incarnation: BindSlotCrc
 * of @fn SwCrcGeneration). */
#ifdef V3_PROTOCOL
#define CRCV(t, inc, g, k) ((t) + 512 * ((g) * 4 + (k)))
#else
#define CRCV(t, inc, g, k) ((t) + 512 * (((inc) * 16 + (g)) * 4 + (k)))
#endif

#define O_NONE 0
#define O_STORED 1
#define O_DUP 2
#define O_FULL 3
#define O_FENCED 4

/* Ghosts. */
byte owner = P0;       /* who legitimately owns partition 0: R from the moment
                          the new incarnation's record is in memory */
bool lease_moved;      /* the lease on partition 0 moved (P0 crashed or paused) */
bool p0_crashed, p0_done, p1_ops_done, radopted, probe_done;
byte pause_budget = PAUSES;
short legit[2 * NSLOT];  /* bit g of [writer/2 * NSLOT + s]: that writer
                            committed generation g of slot s while owning */
byte p0_lastkey;       /* the key of P0's last Store that committed */
byte probe_key;        /* the key the end probe must find now (0: none) */

/* A crash point of P0 (reads only a local, for partial-order reduction). */
#define FP \
  if \
  :: mayfail -> goto crashed_ \
  :: true \
  fi

/* Does `me` own partition 0 in its own belief (its lines are then
 * authoritative in its cache: no invalidates, docs/coherence.md)? */
#define OWNVIEW (me == P0 || (me == R && radopted))

/* @fn RegionImpl::SwStore: @fn RegionImpl::SwBeginWrite (SW1..SW3) and
 * @fn RegionImpl::SwCommitWrite (SW4, the fence check, SW5) of
 * docs/coherence.md. */
inline STORE(k) {
  outcome = O_NONE;
  late = (owner != me);  /* ghost: the lease had moved on before we began */
  FP;
  /* SW1: a READY copy in the partition (own lines, from own cache). */
  fs = NONE;
  s = 0;
  do
  :: s < NSLOT ->
     LD(me, A_TAG(s), t);
     if
     :: t == k ->
        LD(me, A_ST(s), w);
        LD(me, A_KEY(s), t);
        if
#ifdef V3_PROTOCOL
        :: WST(w) == READY && t == k -> fs = s; break
#else
        /* A READY block of another incarnation is no block (SwFind). */
        :: WST(w) == READY && t == k && WINC(w) == myinc -> fs = s; break
#endif
        :: else
        fi
     :: else
     fi;
     s++
  :: else -> break
  od;
  if
  :: fs != NONE -> outcome = O_DUP
  :: else ->
     FP;
     /* SW2: a FREE way first, else the least recently used READY one
        (layout 4's choice among the key's ways, in @fn RegionImpl::SwBeginWrite
        as it was; any order here). Layout 6's entries and data slots, SW2b
        and the sweep's data slot release are not modelled yet. */
     s = 0;
     do
     :: s < NSLOT ->
        LD(me, A_ST(s), w);
        if
        :: WST(w) == FREE -> fs = s; break
        :: else -> s++
        fi
     :: else -> break
     od;
     if
     :: fs == NONE ->
        /* The recency ticks (process memory of the holder, never region
           lines: @fn RegionImpl::SwTouch) are not modelled, so any READY
           way may be the one evicted: every order LRU can produce. */
        select (t : 0 .. NSLOT - 1);
        c = 0;
        do
        :: c < NSLOT ->
           s = (t + c) % NSLOT;
           LD(me, A_ST(s), w);
           if
           :: WST(w) == READY -> fs = s; break
           :: else -> c++
           fi
        :: else -> break
        od;
        c = 0; t = 0
     :: else
     fi;
     if
     :: fs == NONE -> outcome = O_FULL
     :: else ->
        g = WGEN(w) + 1;
        assert(g < 16);
        mytok = TOK(me, fs, g, k);
        printf("MSC: P%d claims slot %d gen %d (inc %d) for key %d\n", me, fs, g, myinc, k);
        /* SW3: WRITING, key, tag; flushed before any payload byte changes. */
        ST(me, A_ST(fs), W(myinc, g, WRITING));
        FP;
        ST(me, A_KEY(fs), k);
        FP;
        ST(me, A_TAG(fs), k);
        FP;
        FLUSH(me, L_META(fs), S_SW3_META);
        FP;
        FLUSH(me, L_TAG, S_SW3_TAG);
        FP;
        /* SW4: the payload, flushed. */
        ST(me, A_DATA(fs), mytok);
        FP;
        FLUSH(me, L_DATA(fs), S_SW4_DATA);
        FP;
        /* The fence check (@fn RegionImpl::SwStillOwner): the record still
           names our incarnation. */
        INVAL(me, L_REC, S_CHECK_REC);
        LD(me, A_REC, t);
        if
        :: t / 4 > myinc ->
           printf("MSC: P%d finds its record moved on: fenced, no commit\n", me);
           outcome = O_FENCED
#ifdef HB_IN_REC
        :: t / 4 < myinc ->
           /* @fn RegionImpl::SwStillOwner: an older word is a previous
              holder's late line; put ours back. */
           printf("MSC: P%d finds an older record word: puts its own back\n", me);
           ST(me, A_REC, REC(myinc));  /* left dirty, as the code does */
           t = REC(myinc)
#endif
        :: else
        fi;
        if
        :: outcome == O_FENCED
        :: else ->
           FP;  /* @fp sw.commit.before_ready: a holder stalled here is the zombie */
           /* SW5: crc, then READY, one line. */
           ST(me, A_CRC(fs), CRCV(mytok, myinc, g, k));
           FP;
           d_step {
             FILL(me, L_META(fs));
             cw[me * NW + A_ST(fs)] = W(myinc, g, READY);
             cst[me * NL + L_META(fs)] = D_;
             if
             :: owner == me -> legit[(me / 2) * NSLOT + fs] = legit[(me / 2) * NSLOT + fs] | (1 << g)
             :: else -> printf("MSC: P%d commits slot %d gen %d after the lease moved on\n", me, fs, g)
             fi
           }
           FP;
           FLUSH(me, L_META(fs), S_SW5_META);
           outcome = O_STORED
        fi
     fi
  fi;
#ifndef CHECK_READS_ONLY
  /* Fencing: a Store that began after the lease moved on is refused. */
  assert(!(late && outcome == O_STORED));
#endif
  late = false;
  fs = NONE; s = 0; t = 0; w = 0; g = 0; mytok = 0
}

/* @fn RegionImpl::SwLoad: SR1 (@fn RegionImpl::SwFind, @fn RegionImpl::SwReadMeta)
 * .. SR4 of docs/coherence.md. */
inline LOAD(k) {
  hit = false;
  FP;
  own = OWNVIEW;
  /* SR1: tags, then the meta line of a matching way. */
  if
  :: !own -> INVAL(me, L_TAG, S_SR1_TAG)
  :: else
  fi;
  fs = NONE;
  s = 0;
  do
  :: s < NSLOT ->
     LD(me, A_TAG(s), t);
     if
     :: t == k ->
        if
        :: !own -> INVAL(me, L_META(s), S_SR1_META)
        :: else
        fi;
        LD(me, A_ST(s), w);
        LD(me, A_KEY(s), t);
        if
        :: WST(w) == READY && t == k -> LD(me, A_CRC(s), crc); fs = s; break
        :: else
        fi
     :: else
     fi;
     s++
  :: else -> break
  od;
  if
  :: fs == NONE
  :: else ->
     FP;
     /* SR2: the copy. */
     if
     :: !own -> INVAL(me, L_DATA(fs), S_SR2_DATA)
     :: else
     fi;
     LD(me, A_DATA(fs), got);
     FP;
     /* SR3: the state word again. */
     if
     :: !own -> INVAL(me, L_META(fs), S_SR3_META)
     :: else
     fi;
     LD(me, A_ST(fs), t);
     if
     :: t != w -> printf("MSC: P%d misses key %d: slot %d changed\n", me, k, fs)
     :: else ->
#ifndef V3_PROTOCOL
        /* The incarnation that wrote the block still owns the partition
           (@fn RegionImpl::SwWriterCurrent). */
        INVAL(me, L_REC, S_SR3_REC);
        LD(me, A_REC, t);
        if
        :: t != REC(WINC(w)) ->
           printf("MSC: P%d misses key %d: slot %d is of incarnation %d\n", me, k, fs, WINC(w))
        :: else ->
#endif
           /* SR4: the bound CRC. */
           if
           :: CRCV(got, WINC(w), WGEN(w), k) != crc ->
              printf("MSC: P%d: CRC of slot %d fails (kCorruption)\n", me, fs);
              /* Without damage and with the lease never moved, a CRC
                 failure is the protocol's failure (the seqlock let a
                 changing block through). */
              assert(lease_moved)
           :: else ->
              printf("MSC: P%d hit key %d slot %d gen %d: bytes of P%d slot %d gen %d key %d\n",
                     me, k, fs, WGEN(w), TOKW(got), TOKS(got), TOKG(got), TOKK(got));
              /* The property: the bytes of the generation validated, for
                 the key asked, committed by a writer that owned the
                 partition when it committed. */
              assert(got != 0 && TOKS(got) == fs && TOKG(got) == WGEN(w) && TOKK(got) == k &&
                     ((legit[(TOKW(got) / 2) * NSLOT + fs] >> WGEN(w)) & 1));
              hit = true
           fi
#ifndef V3_PROTOCOL
        fi
#endif
     fi
  fi;
  fs = NONE; s = 0; t = 0; w = 0; got = 0; crc = 0; own = false
}

/* @fn RegionImpl::SwRecoverPartition: the attach sweep of a new incarnation
 * (and its periodic re-sweep from @fn RegionImpl::SwHeartbeatLoop): this
 * host's copies of the partition's meta lines are dropped first; every slot
 * that is WRITING, or (v4) READY of another incarnation, becomes FREE(g+1),
 * tag 0. (The code's periodic sweep keeps WRITING slots of its own
 * incarnation: its own Stores in flight. R never sweeps during its own
 * Store here, so the model needs no such case.) */
inline SWEEP() {
  s = 0;
  do
  :: s < NSLOT ->
#ifndef V3_PROTOCOL
     INVAL(me, L_META(s), S_SWEEP_INV);
#endif
     LD(me, A_ST(s), w);
     if
#ifdef V3_PROTOCOL
     :: WST(w) == WRITING ->
#else
     :: WST(w) == WRITING || (WST(w) == READY && WINC(w) != myinc) ->
#endif
        printf("MSC: R sweeps slot %d (state %d gen %d) to FREE\n", s, WST(w), WGEN(w));
        ST(me, A_ST(s), W(0, WGEN(w) + 1, FREE));
        ST(me, A_TAG(s), 0);
        FLUSH(me, L_META(s), S_SWEEP_META)
     :: else
     fi;
     s++
  :: else -> break
  od;
  s = 0; w = 0
}

/* The lease gives partition 0 to R: @fn RegionImpl::SwRegister stores
 * the new incarnation's ACTIVE record; the attach sweep's first step
 * (@fn RegionImpl::SwStillOwner) invalidates the record line, which writes
 * it back; then the sweep. */
inline ADOPT() {
  d_step {
    lease_moved = true;
    if
    :: !p0_crashed && !p0_done -> pause_budget--; printf("MSC: P0 paused past the liveness timeout\n")
    :: else
    fi;
    printf("MSC: the lease gives partition 0 to R (incarnation 2)\n")
  }
  myinc = 2;
  ST(me, A_REC, REC(myinc));
  d_step {
    if
    :: DROP != S_ADOPT_REC && cst[me * NL + L_REC] == D_ -> WRITEBACK(me, L_REC)
    :: else
    fi;
    owner = R
  }
  radopted = true;
  SWEEP()
}

#define OPLOCALS \
  byte k, s, t, c, fs = NONE, g, outcome, myinc; \
  bool hit, own, mayfail, late; \
  int w, got, crc, mytok

proctype Writer() {
  OPLOCALS;
  byte op, me = P0;
  myinc = 1;
  mayfail = (CRASHES > 0);
  do
  :: op < OPS0 ->
     op++;
     select (k : 1 .. NK);
     if
     :: STORE(k);
        if
        :: outcome == O_STORED -> p0_lastkey = k
        :: else
        fi
     :: LOAD(k)
     fi;
     k = 0; outcome = O_NONE; hit = false
  :: else -> break
  od;
  goto finish;
crashed_:
  p0_crashed = true;
  printf("MSC: P0 crashes\n");
finish:
  p0_done = true
}

#ifdef HB_IN_REC
/* P0's heartbeat thread (@fn RegionImpl::SwHeartbeatLoop): stores and
 * flushes its counter, which shares the
 * registry record's line (ParticipantRecord: state, heartbeat). */
proctype Heartbeat() {
  byte me = P0;
  (!p0_crashed);
  printf("MSC: P0's heartbeat thread stores into its cached record line\n");
  ST(me, A_HB, 1);
  FLUSH(me, L_REC, 99)  /* not a mutant site: liveness is not modelled */
}
#endif

/* P1: loads from another host, then the end probe. */
proctype Reader() {
  OPLOCALS;
  byte op, me = P1;
  do
  :: op < OPS1 ->
     op++;
     select (k : 1 .. NK);
     LOAD(k);
     k = 0; hit = false
  :: else -> break
  od;
  p1_ops_done = true;
#ifndef CHECK_READS_ONLY
  /* The end probe: the key the partition's owner last stored, or each key
     R stores at the end, is found from another host. */
  do
  :: probe_key != 0 ->
     k = probe_key;
     LOAD(k);
     printf("MSC: probe of key %d from P1: hit %d\n", k, hit);
     assert(hit);
     k = 0; hit = false;
     probe_key = 0
  :: probe_done -> break
  od;
#endif
crashed_:  /* P1 never crashes (FP needs the label) */
  skip
}

proctype Next() {
  OPLOCALS;
  byte op, me = R;
  myinc = 0;
  do
  :: !radopted && op < RLOADS -> op++; select (k : 1 .. NK); LOAD(k); k = 0; hit = false
  :: !radopted && !p0_done && pause_budget > 0 -> ADOPT()
  :: !radopted && p0_crashed -> ADOPT()
#ifndef V3_PROTOCOL
  :: radopted -> SWEEP()  /* the holder's periodic re-sweep */
#endif
  :: p0_done && p1_ops_done -> break
  od;
  /* The end: P0 stopped (finished, crashed, or a finished zombie). */
  if
  :: p0_crashed && !radopted -> ADOPT()  /* the lease moves after the timeout */
  :: else
  fi;
  if
  :: radopted ->
     /* The stall timeout has passed: the old incarnation's host has
        written back whatever it held. */
     DRAINED(P0);
#ifndef V3_PROTOCOL
     SWEEP()
#else
     skip
#endif
  :: else
  fi;
#ifndef CHECK_READS_ONLY
  /* After crashes every slot is FREE or READY again (in memory). */
  s = 0;
  do
  :: s < NSLOT ->
     assert(WST(mem[A_ST(s)]) == FREE || WST(mem[A_ST(s)]) == READY);
     s++
  :: else -> break
  od;
  s = 0;
  if
  :: radopted ->
     /* Every key stays storable by the partition's owner, and readable
        from another host. */
     k = 1;
     do
     :: k <= NK ->
        STORE(k);
        assert(outcome == O_STORED || outcome == O_DUP);
        probe_key = k;
        (probe_key == 0);
        k++
     :: else -> break
     od
  :: else ->
     if
     :: p0_lastkey != 0 -> probe_key = p0_lastkey; (probe_key == 0)
     :: else
     fi
  fi;
#endif
  probe_done = true;
crashed_:  /* R never crashes */
  skip
}

init {
  byte i, l;
  atomic {
    /* The layout: word -> line, line -> its words. */
    i = 0;
    do
    :: i < NW ->
       if
       :: i == A_REC -> wline[i] = L_REC
#ifdef HB_IN_REC
       :: i == A_HB -> wline[i] = L_REC
#else
       :: i == A_HB -> wline[i] = L_HB
#endif
       :: i >= A_TAG(0) && i < A_ST(0) -> wline[i] = L_TAG
       :: i >= A_ST(0) && i < A_DATA(0) -> wline[i] = L_META((i - A_ST(0)) / 3)
       :: i >= A_DATA(0) -> wline[i] = L_DATA(i - A_DATA(0))
       fi;
       i++
    :: else -> break
    od;
    l = 0;
    do
    :: l < NL ->
       lfirst[l] = 255;
       i = 0;
       do
       :: i < NW ->
          if
          :: wline[i] == l -> lnum[l]++; if :: lfirst[l] == 255 -> lfirst[l] = i :: else fi
          :: else
          fi;
          i++
       :: else -> break
       od;
       if
       :: lfirst[l] == 255 -> lfirst[l] = 0
       :: else
       fi;
       l++
    :: else -> break
    od;
    /* Formatted, P0 attached as incarnation 1 (its record flushed), and
       (unless -DNO_PRELOAD) slot 0 holds a block of key NK that P0 stored
       and flushed before: a Store may have to evict it while readers copy
       it. */
    mem[A_REC] = REC(1);
#ifndef NO_PRELOAD
    mem[A_ST(0)] = W(1, 1, READY);
    mem[A_KEY(0)] = NK;
    mem[A_TAG(0)] = NK;
    mem[A_DATA(0)] = TOK(P0, 0, 1, NK);
    mem[A_CRC(0)] = CRCV(TOK(P0, 0, 1, NK), 1, 1, NK);
    legit[0] = 2;
    p0_lastkey = NK;
#endif
    /* P0's cache still holds what it wrote and flushed (CLWB keeps a line
       cached): its record line and the preloaded slot's lines, clean. */
    l = 0;
    do
    :: l < NL ->
       if
#ifndef NO_PRELOAD
       :: l == L_TAG || l == L_META(0) || l == L_DATA(0) -> cst[P0 * NL + l] = C_
#endif
       :: l == L_REC -> cst[P0 * NL + l] = C_
       :: else
       fi;
       l++
    :: else -> break
    od;
    i = 0;
    do
    :: i < NW -> cw[P0 * NW + i] = mem[i]; i++
    :: else -> break
    od;
    i = 0; l = 0;
    run Cache(P0);
    run Cache(P1);
    run Cache(R);
    run Writer();
    run Reader();
    run Next()
#ifdef HB_IN_REC
    ;
    run Heartbeat()
#endif
  }
}
