/* Spin model of the cxlkv slot protocol in coherence=software mode
 * (docs/coherence.md, layout version 6): per-host caches of lines over
 * non-coherent shared memory (cache.pml), flush and invalidate, lines written
 * back whole at any moment, no atomic read-modify-write at all. What is
 * modelled, the abstractions, bounds and results: docs/model.md, "Software
 * mode".
 *
 * Layout 6: index entries (SlotMeta lines: state word, key, CRC, data index)
 * apart from data slots (payload lines); the holder keeps which entry holds
 * which data slot, the free data slots and the eviction order in its own
 * process memory (software_state.h: SwHolderState), never in the region.
 * NE entries and ND data slots (default 2 and 1: a Store must reuse a data
 * slot that another entry named).
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
 *    (RLOADS) as a reader. Afterwards it sweeps and checks its blocks'
 *    payload periodically (RSWEEPS) and may store (RSTORES, default 0)
 *    while the old holder still runs (the paused old holder's late lines
 *    land over entries it believes READY: the sweep gives their data slots
 *    back; its late tag line and fill land over R's tag and payload: the
 *    sweep rewrites the tag line, the payload check frees the block); at
 *    the end it settles, stores every key and probes the partition.
 *  - one Cache process per host (cache.pml).
 *
 * The default is the code as written (layout version 6, src/region/software.cc).
 * Variants (-D flags):
 *  V3_PROTOCOL   layout version 3's fencing as v0.1.0 shipped it: no
 *                incarnation in the slot word or its CRC, readers do not
 *                re-read the registry record, the attach sweep keeps READY
 *                blocks and reads without invalidating, no periodic sweep.
 *  HB_IN_REC     the default protocol, but with the heartbeat stored in the
 *                registry record's line (ParticipantRecord as in layout v3).
 *  UNBOUND_DATA  the CRC does not bind the data slot (a mutant).
 *  NO_GIVEBACK   the periodic sweep frees a line without giving its data
 *                slot back (a mutant of SwRecoverPartition's ReleaseEntry).
 *  NO_REPAIR     the holder neither rewrites its tag line from its entries
 *                in the sweep nor checks its READY blocks' payload in memory
 *                (layout 6 as first written: a paused old holder's late tag
 *                line and fill then hide the new holder's block).
 *  DROP=n        site n's flush or invalidate removed (the mutants).
 *  CHECK_READS_ONLY  only the read properties.
 *  NO_VISIBLE    the end probe's misses are not violations.
 *  CLEAN_DROPS   caches also drop clean lines at any moment (cache.pml;
 *                DROP_HOSTS=mask: only the caches of those hosts, bit h
 *                for host h; default 7, all three).
 *
 * Every step names the failpoint (`@fp`) or function (`@fn`) of src/region/
 * it stands for; scripts/check-model-names.sh checks that each exists.
 */

#ifndef NE
#define NE 2
#endif
#ifndef ND
#define ND 1
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
#ifndef RSWEEPS
#define RSWEEPS 1
#endif
#ifndef RSTORES
#define RSTORES 0
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
#define A_TAG(e) (2 + (e))         /* the set's tag line, one tag per entry */
#define A_ST(e) (2 + NE + 4 * (e)) /* entry e's SlotMeta line: state word, */
#define A_KEY(e) (A_ST(e) + 1)     /*   key (key, ns, len: one word here), */
#define A_CRC(e) (A_ST(e) + 2)     /*   CRC, */
#define A_DIX(e) (A_ST(e) + 3)     /*   data (the data slot's index) */
#define A_DATA(d) (2 + 5 * NE + (d))  /* data slot d's payload */
#define NW (2 + 5 * NE + ND)
#define L_REC 0
#define L_HB 1
#define L_TAG 2
#define L_META(e) (3 + (e))
#define L_DATA(d) (3 + NE + (d))
#define NL (3 + NE + ND)

/* Flush and invalidate sites (DROP=n removes site n). */
#define S_SW2B 1        /* SW2b: the victim entry's FREE(g+1) reaches memory before its data slot's bytes change */
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
#define S_SWEEP_META 13 /* attach/owner sweep: a freed entry's meta line */
#define S_SWEEP_TAG 14  /* attach/owner sweep: the tag line rewritten from the entries */
#define S_CHECK_DATA 15 /* the holder's payload check: its cached copy of a READY block's payload */
/* SW2b does not flush the tag line it zeroes (nor does the code): a tag is a
 * hint, a reader that follows a stale tag finds the entry FREE. The sweep
 * flushes the whole tag line, rewritten from the entries, because a paused
 * old holder's SW3 flushes its whole stale copy of it over the new holder's
 * tags. Layout 6's SW3 flushes no meta line (SW2b and the sweep left the
 * entry, and the data slot's previous entry, FREE in memory). */

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

/* "Bytes" are a token (writer, entry, generation, key): equal only if they
 * are the same writer's copy for the same lease. 0 = bytes nobody wrote. */
#define TOK(w, e, g, k) (((((w) / 2) * NE + (e)) * 16 + (g)) * 4 + (k))
#define TOKW(t) ((((t) / 64) / NE) * 2)
#define TOKE(t) (((t) / 64) % NE)
#define TOKG(t) (((t) / 4) % 16)
#define TOKK(t) ((t) % 4)
#define TOKN (2 * NE * 64)
/* The bound CRC as a value without collisions: the payload's token and the
 * trailer (generation, key, the writer's incarnation: BindSlotCrc of
 * @fn SwCrcGeneration, and the data slot: SlotCrcTrailerV5). */
#if defined(V3_PROTOCOL)
#define CRCV(t, inc, g, k, d) ((t) + TOKN * ((g) * 4 + (k)))
#elif defined(UNBOUND_DATA)
#define CRCV(t, inc, g, k, d) ((t) + TOKN * (((inc) * 16 + (g)) * 4 + (k)))
#else
#define CRCV(t, inc, g, k, d) ((t) + TOKN * ((((inc) * 16 + (g)) * 4 + (k)) * ND + (d)))
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
short legit[2 * NE];   /* bit g of [writer/2 * NE + e]: that writer
                          committed generation g of entry e while owning */
byte p0_lastkey;       /* the key of P0's last Store that committed */
byte probe_key;        /* the key the end probe must find now (0: none) */

/* The holders' process memory (SwHolderState; [writer/2 * ND + d]): hent,
 * the entry holding data slot d (NONE: free); hq, whether its block is
 * READY in the eviction order (Commit'ted). Region lines never hold these. */
byte hent[2 * ND];
bool hq[2 * ND];
#define HD(d) ((me / 2) * ND + (d))

/* A crash point of P0 (reads only a local, for partial-order reduction). */
#define FP \
  if \
  :: mayfail -> goto crashed_ \
  :: true \
  fi

/* Does `me` own partition 0 in its own belief (its lines are then
 * authoritative in its cache: no invalidates, docs/coherence.md)? */
#define OWNVIEW (me == P0 || (me == R && radopted))

/* SwHolderState::ReleaseEntry(e): the data slot entry e holds goes back. */
inline RELEASE_ENTRY(e) {
  c = 0;
  do
  :: c < ND ->
     if
     :: hent[HD(c)] == e -> hent[HD(c)] = NONE; hq[HD(c)] = false
     :: else
     fi;
     c++
  :: else -> break
  od;
  c = 0
}

/* @fn RegionImpl::SwEvictEntry (SW2b): the entry's line says FREE(g+1) in
 * memory, flushed and fenced (the failpoint @fp sw.evict.before_fence lies
 * between the two; the model's FLUSH is the pair), before any payload byte
 * of its data slot changes. The tag (a hint) is zeroed, not flushed. */
inline EVICT(e, ew) {
  printf("MSC: P%d frees entry %d (gen %d) to FREE gen %d (SW2b)\n", me, e, WGEN(ew), WGEN(ew) + 1);
  ST(me, A_TAG(e), 0);
  FP;
  ST(me, A_ST(e), W(0, WGEN(ew) + 1, FREE));
  FP;
  FLUSH(me, L_META(e), S_SW2B);
  FP
}

/* @fn RegionImpl::SwFreeOwn: the entry, if its word (own cache) is still
 * `ew`, freed (SW2b), then its data slot given back. */
inline FREE_OWN(e, ew) {
  LD(me, A_ST(e), t);
  if
  :: t == ew -> EVICT(e, ew); RELEASE_ENTRY(e)
  :: else
  fi
}

/* @fn RegionImpl::SwStore: @fn RegionImpl::SwBeginWrite (SW1..SW3) and
 * @fn RegionImpl::SwCommitWrite (SW4, the fence check, SW5) of
 * docs/coherence.md. */
inline STORE(k) {
  outcome = O_NONE;
  late = (owner != me);  /* ghost: the lease had moved on before we began */
  FP;
  /* SW1: a READY copy in the partition (own lines, from own cache;
     @fn RegionImpl::SwFind). */
  fs = NONE;
  s = 0;
  do
  :: s < NE ->
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
     /* SW2: an index entry: a FREE one of the key's sets (every entry is
        in them here), else a READY one, evicted (the code takes the one
        whose data slot is least recently used; the ticks are process
        memory, so any READY entry may be the one: every order). */
     s = 0;
     do
     :: s < NE ->
        LD(me, A_ST(s), w);
        if
        :: WST(w) == FREE -> fs = s; break
        :: else -> s++
        fi
     :: else -> break
     od;
     if
     :: fs == NONE ->
        select (v : 0 .. NE - 1);
        c = 0;
        do
        :: c < NE ->
           s = (v + c) % NE;
           LD(me, A_ST(s), w);
           if
           :: WST(w) == READY -> fs = s; break
           :: else -> c++
           fi
        :: else -> break
        od;
        c = 0; v = 0;
        if
        :: fs != NONE ->
           FREE_OWN(fs, w);
           LD(me, A_ST(fs), w)  /* chosen_word: FREE(g+1) now */
        :: else
        fi
     :: else
     fi;
     if
     :: fs == NONE -> outcome = O_FULL
     :: else ->
        /* A data slot: a free one (SwHolderState::TakeFree), else the least
           recently used READY block's (PopOldest; any one here), whose
           entry is freed first: SW2b. */
        dd = NONE;
        d_step {
          c = 0;
          do
          :: c < ND && hent[HD(c)] == NONE -> dd = c; hent[HD(c)] = fs; break
          :: c < ND && hent[HD(c)] != NONE -> c++
          :: else -> break
          od;
          c = 0
        }
        if
        :: dd == NONE ->
           select (v : 0 .. ND - 1);
           c = 0;
           do
           :: c < ND ->
              if
              :: hq[HD((v + c) % ND)] -> dd = (v + c) % ND; break
              :: else -> c++
              fi
           :: else -> break
           od;
           c = 0; v = 0;
           if
           :: dd == NONE -> outcome = O_FULL  /* every data slot being written */
           :: else ->
              v = hent[HD(dd)];
              hent[HD(dd)] = NONE; hq[HD(dd)] = false;
              LD(me, A_ST(v), vw);
              if
              :: WST(vw) != FREE -> EVICT(v, vw)
              :: else
              fi;
              hent[HD(dd)] = fs;  /* Reassign */
              v = 0; vw = 0
           fi
        :: else
        fi
     fi;
     if
     :: outcome == O_FULL
     :: else ->
        g = WGEN(w) + 1;
        assert(g < 16);
        mytok = TOK(me, fs, g, k);
        printf("MSC: P%d claims entry %d gen %d (inc %d) on data slot %d for key %d\n", me, fs, g, myinc, dd, k);
        /* SW3: WRITING(g+1), key, crc 0, the data index, and the tag; only
           the tag line is flushed (layout 6). */
        ST(me, A_ST(fs), W(myinc, g, WRITING));
        FP;
        ST(me, A_KEY(fs), k);
        ST(me, A_CRC(fs), 0);
        ST(me, A_DIX(fs), dd);
        FP;
        ST(me, A_TAG(fs), k);
        FP;
        FLUSH(me, L_TAG, S_SW3_TAG);
        FP;
        /* The fill, then SW4: the payload, flushed. */
        ST(me, A_DATA(dd), mytok);
        FP;
        FLUSH(me, L_DATA(dd), S_SW4_DATA);
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
           /* The lost-race check: our own line still says our WRITING. */
           LD(me, A_ST(fs), t);
           if
           :: t != W(myinc, g, WRITING) -> outcome = O_FENCED  /* kLostRace: no commit */
           :: else ->
              FP;  /* @fp sw.commit.before_ready: a holder stalled here is the zombie */
              /* SW5: crc (binding generation, key, incarnation and data
                 slot), then READY, one line. */
              ST(me, A_CRC(fs), CRCV(mytok, myinc, g, k, dd));
              FP;
              d_step {
                FILL(me, L_META(fs));
                cw[me * NW + A_ST(fs)] = W(myinc, g, READY);
                cst[me * NL + L_META(fs)] = D_;
                if
                :: owner == me -> legit[(me / 2) * NE + fs] = legit[(me / 2) * NE + fs] | (1 << g)
                :: else -> printf("MSC: P%d commits entry %d gen %d after the lease moved on\n", me, fs, g)
                fi
              }
              FP;
              FLUSH(me, L_META(fs), S_SW5_META);
              /* SwHolderState::Commit: into the order if the data slot is
                 still this entry's. */
              if
              :: hent[HD(dd)] == fs -> hq[HD(dd)] = true
              :: else
              fi;
              outcome = O_STORED
           fi
        fi
     fi
  fi;
#ifndef CHECK_READS_ONLY
  /* Fencing: a Store that began after the lease moved on is refused. */
  assert(!(late && outcome == O_STORED));
#endif
  late = false;
  fs = NONE; dd = NONE; s = 0; t = 0; w = 0; g = 0; mytok = 0
}

/* @fn RegionImpl::SwLoad: SR1 (@fn RegionImpl::SwFind, @fn RegionImpl::SwReadMeta)
 * .. SR4 of docs/coherence.md. */
inline LOAD(k) {
  hit = false;
  FP;
  own = OWNVIEW;
  /* SR1: tags, then the meta line of a matching entry. */
  if
  :: !own -> INVAL(me, L_TAG, S_SR1_TAG)
  :: else
  fi;
  fs = NONE;
  s = 0;
  do
  :: s < NE ->
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
        :: WST(w) == READY && t == k ->
           LD(me, A_CRC(s), crc); LD(me, A_DIX(s), dd); fs = s; break
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
     /* SR2: the copy of the data slot the entry names. */
     if
     :: !own -> INVAL(me, L_DATA(dd), S_SR2_DATA)
     :: else
     fi;
     LD(me, A_DATA(dd), got);
     FP;
     /* SR3: the state word and data index again. */
     if
     :: !own -> INVAL(me, L_META(fs), S_SR3_META)
     :: else
     fi;
     LD(me, A_ST(fs), t);
     LD(me, A_DIX(fs), v);
     if
     :: t != w || v != dd -> printf("MSC: P%d misses key %d: entry %d changed\n", me, k, fs)
     :: else ->
#ifndef V3_PROTOCOL
        /* The incarnation that wrote the block still owns the partition
           (@fn RegionImpl::SwWriterCurrent). */
        INVAL(me, L_REC, S_SR3_REC);
        LD(me, A_REC, t);
        if
        :: t != REC(WINC(w)) ->
           printf("MSC: P%d misses key %d: entry %d is of incarnation %d\n", me, k, fs, WINC(w))
        :: else ->
#endif
           /* SR4: the bound CRC. */
           if
           :: CRCV(got, WINC(w), WGEN(w), k, dd) != crc ->
              printf("MSC: P%d: CRC of entry %d (data slot %d) fails (kCorruption)\n", me, fs, dd);
              /* Without damage and with the lease never moved, a CRC
                 failure is the protocol's failure (the seqlock let a
                 changing block through). */
              assert(lease_moved);
              /* The holder frees its own entry that failed (SwFreeOwn). */
              if
              :: own -> FREE_OWN(fs, w)
              :: else
              fi
           :: else ->
              printf("MSC: P%d hit key %d entry %d gen %d data slot %d: bytes of P%d entry %d gen %d key %d\n",
                     me, k, fs, WGEN(w), dd, TOKW(got), TOKE(got), TOKG(got), TOKK(got));
              /* The property: the bytes of the generation validated, for
                 the key asked, written for that entry by a writer that
                 owned the partition when it committed. */
              assert(got != 0 && TOKE(got) == fs && TOKG(got) == WGEN(w) && TOKK(got) == k &&
                     ((legit[(TOKW(got) / 2) * NE + fs] >> WGEN(w)) & 1));
              hit = true
           fi
#ifndef V3_PROTOCOL
        fi
#endif
     fi
  fi;
  fs = NONE; dd = NONE; s = 0; t = 0; v = 0; w = 0; got = 0; crc = 0; own = false
}

/* @fn RegionImpl::SwRecoverPartition: the attach sweep of a new incarnation
 * (which starts the holder's process memory with every data slot free:
 * SwHolderState::Reset) and its periodic re-sweep from
 * @fn RegionImpl::SwHeartbeatLoop: this host's copy of each entry's meta
 * line is dropped first; an entry memory shows READY or WRITING of ours on
 * the data slot we gave it is kept (periodic sweep only); for any other,
 * the data slot we believed it held is given back (a paused old holder's
 * late line landed over our READY entry), and unless it is FREE with no
 * incarnation it becomes FREE(g+1), flushed. Then the set's whole tag line
 * is rewritten from the entries (a kept one's key, 0 for the others) and
 * flushed. (The code's periodic sweep runs beside the holder's Stores; R
 * never sweeps during its own Store here.) */
inline SWEEP(attach) {
  if
  :: attach ->
     c = 0;
     do
     :: c < ND -> hent[HD(c)] = NONE; hq[HD(c)] = false; c++
     :: else -> break
     od;
     c = 0
  :: else
  fi;
  s = 0;
  do
  :: s < NE ->
#ifndef V3_PROTOCOL
     INVAL(me, L_META(s), S_SWEEP_INV);
#endif
     LD(me, A_ST(s), w);
     LD(me, A_DIX(s), v);
#ifdef V3_PROTOCOL
     if
     :: WST(w) == WRITING ->
        printf("MSC: R sweeps entry %d (state %d gen %d) to FREE\n", s, WST(w), WGEN(w));
        RELEASE_ENTRY(s);
        ST(me, A_ST(s), W(0, WGEN(w) + 1, FREE));
        ST(me, A_TAG(s), 0);
        FLUSH(me, L_META(s), S_SWEEP_META)
     :: else
     fi;
#else
     /* keep: ours as memory says, on the data slot we gave it. */
     if
     :: !attach && (WST(w) == READY || WST(w) == WRITING) && WINC(w) == myinc &&
        hent[HD(v)] == s ->
        skip
     :: else ->
#ifndef NO_GIVEBACK
        if
        :: !attach -> RELEASE_ENTRY(s)
        :: else
        fi;
#endif
        if
        :: WST(w) == FREE && WINC(w) == 0
        :: else ->
           printf("MSC: R sweeps entry %d (state %d gen %d inc %d) to FREE\n", s, WST(w), WGEN(w), WINC(w));
#ifdef NO_REPAIR
           ST(me, A_TAG(s), 0);
#endif
           ST(me, A_ST(s), W(0, WGEN(w) + 1, FREE));
           FLUSH(me, L_META(s), S_SWEEP_META)
        fi
     fi;
#endif
     s++
  :: else -> break
  od;
#if !defined(V3_PROTOCOL) && !defined(NO_REPAIR)
  /* The set's tag line, rewritten whole from the entries as the loop left
     them in our cache (kept: READY or WRITING of ours; every other one is
     FREE now) and flushed: a paused old holder's SW3 flushes its whole stale
     copy of the line, which would hide our blocks from other hosts. */
  s = 0;
  do
  :: s < NE ->
     LD(me, A_ST(s), w);
     if
     :: !attach && (WST(w) == READY || WST(w) == WRITING) && WINC(w) == myinc -> LD(me, A_KEY(s), t)
     :: else -> t = 0
     fi;
     ST(me, A_TAG(s), t);
     s++
  :: else -> break
  od;
  FLUSH(me, L_TAG, S_SWEEP_TAG);
  t = 0;
#endif
  s = 0; w = 0; v = 0
}

/* @fn RegionImpl::SwScrubPayloads: the holder's heartbeat checks each READY
 * block of its own (on the data slot it gave it) as memory holds it: this
 * host's copy of the payload is dropped, the bytes read and their bound CRC
 * compared; a block that fails is freed (@fn RegionImpl::SwFreeOwn). A
 * paused old holder's fill lands in a data slot the new holder's READY entry
 * names while the new holder's own cached copy still holds its bytes. */
inline CHECK_PAYLOADS() {
#ifndef NO_REPAIR
  s = 0;
  do
  :: s < NE ->
     LD(me, A_ST(s), w);
     LD(me, A_DIX(s), v);
     if
     :: WST(w) == READY && WINC(w) == myinc && hent[HD(v)] == s ->
        LD(me, A_KEY(s), k);
        LD(me, A_CRC(s), crc);
        INVAL(me, L_DATA(v), S_CHECK_DATA);
        LD(me, A_DATA(v), got);
        if
        :: CRCV(got, myinc, WGEN(w), k, v) != crc ->
           printf("MSC: R's payload check: entry %d (data slot %d) fails its CRC: freed\n", s, v);
           FREE_OWN(s, w)
        :: else
        fi;
        k = 0
     :: else
     fi;
     s++
  :: else -> break
  od;
  s = 0; w = 0; v = 0; t = 0; crc = 0; got = 0
#else
  skip
#endif
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
  SWEEP(true)
}

#define OPLOCALS \
  byte k, s, t, c, v, fs = NONE, dd = NONE, g, outcome, myinc; \
  bool hit, own, mayfail, late; \
  int w, got, crc, mytok, vw

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
#ifndef NO_VISIBLE
     assert(hit);
#endif
     k = 0; hit = false;
     probe_key = 0
  :: probe_done -> break
  od;
#endif
crashed_:  /* P1 never crashes (FP needs the label) */
  skip
}

/* No data slot leaked (the holder h's view against memory): every data
 * slot is free in the holder's view, or named by exactly one entry that
 * memory shows READY of the holder's incarnation, the entry the holder
 * believes holds it; and every READY entry of the holder in memory is the
 * one the holder believes holds its data slot. */
inline CHECK_NO_LEAK(hinc) {
  c = 0;
  do
  :: c < ND ->
     if
     :: hent[HD(c)] == NONE -> assert(!hq[HD(c)])
     :: else ->
        v = hent[HD(c)];
        assert(hq[HD(c)] && WST(mem[A_ST(v)]) == READY && WINC(mem[A_ST(v)]) == hinc &&
               mem[A_DIX(v)] == c)
     fi;
     c++
  :: else -> break
  od;
  s = 0;
  do
  :: s < NE ->
     if
     :: WST(mem[A_ST(s)]) == READY && WINC(mem[A_ST(s)]) == hinc -> assert(hent[HD(mem[A_DIX(s)])] == s)
     :: else
     fi;
     s++
  :: else -> break
  od;
  c = 0; v = 0; s = 0
}

proctype Next() {
  OPLOCALS;
  byte op, sweeps, rstores, me = R;
  myinc = 0;
  do
  :: !radopted && op < RLOADS -> op++; select (k : 1 .. NK); LOAD(k); k = 0; hit = false
  :: !radopted && !p0_done && pause_budget > 0 -> ADOPT()
  :: !radopted && p0_crashed -> ADOPT()
#ifndef V3_PROTOCOL
  :: radopted && sweeps < RSWEEPS ->
     /* the holder's heartbeat: the periodic re-sweep, the payload check */
     sweeps++;
     SWEEP(false);
     CHECK_PAYLOADS()
#endif
  :: radopted && rstores < RSTORES ->
     /* A Store of the new holder while the old one may still run: a
        paused old holder's late line can land over the entry it makes
        READY (the periodic sweep gives that entry's data slot back). */
     rstores++;
     select (k : 1 .. NK);
     STORE(k);
     k = 0; outcome = O_NONE
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
     SWEEP(false);
     CHECK_PAYLOADS()
#else
     skip
#endif
  :: else
  fi;
#ifndef CHECK_READS_ONLY
  /* After crashes every entry is FREE or READY again (in memory). */
  s = 0;
  do
  :: s < NE ->
     assert(WST(mem[A_ST(s)]) == FREE || WST(mem[A_ST(s)]) == READY);
     s++
  :: else -> break
  od;
  s = 0;
  if
  :: radopted ->
#ifndef V3_PROTOCOL
     CHECK_NO_LEAK(2);
#endif
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
#ifndef V3_PROTOCOL
     ;
     CHECK_NO_LEAK(2)
#endif
  :: else ->
     /* P0 held the partition throughout: its view, once its host's
        cache has written back what it held. */
     DRAINED(P0);
     me = P0;
     CHECK_NO_LEAK(1);
     me = R;
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
       :: i >= A_ST(0) && i < A_DATA(0) -> wline[i] = L_META((i - A_ST(0)) / 4)
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
    i = 0;
    do
    :: i < 2 * ND -> hent[i] = NONE; i++
    :: else -> break
    od;
    /* Formatted, P0 attached as incarnation 1 (its record flushed), and
       (unless -DNO_PRELOAD) entry 0 holds a block of key NK in data slot
       0 that P0 stored and flushed before: a Store may have to evict it
       (and reuse its data slot) while readers copy it. */
    mem[A_REC] = REC(1);
#ifndef NO_PRELOAD
    mem[A_ST(0)] = W(1, 1, READY);
    mem[A_KEY(0)] = NK;
    mem[A_TAG(0)] = NK;
    mem[A_DIX(0)] = 0;
    mem[A_DATA(0)] = TOK(P0, 0, 1, NK);
    mem[A_CRC(0)] = CRCV(TOK(P0, 0, 1, NK), 1, 1, NK, 0);
    legit[0] = 2;
    hent[0] = 0;
    hq[0] = true;
    p0_lastkey = NK;
#endif
    /* P0's cache still holds what it wrote and flushed (CLWB keeps a line
       cached): its record line and the preloaded block's lines, clean. */
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
