/* Spin model of the cxlkv slot and participant protocol, hardware-coherence
 * mode (src/region/). What is modelled, the abstractions and their
 * justification, the bounds and the results: docs/model.md.
 *
 * Processes: NP worker participants (P0..P{NP-1}) that each run OPS
 * operations (Store or Load of one of NK keys), one Reclaimer (participant
 * index R = NP: the heartbeat thread of a live participant, which judges
 * others dead and sweeps them, and at the end probes that every key is still
 * storable and loadable), and one Flusher per worker (its x86-TSO store
 * buffer, tso.pml). Format-or-attach is model/format.pml.
 *
 * Faults: a worker may crash (stop forever) at every FP point: with
 * CRASHES=1 one worker (either) may, with CRASHES=2 each may, once. A pause is the Reclaimer judging a *running* worker dead
 * (PAUSES times in all): the worker was stopped past the liveness timeout
 * at whatever step it is at, is reclaimed, and then resumes as a zombie
 * that continues its old steps. With RCRASHES > 0 the Reclaimer may die
 * mid-sweep; the next reclaimer takes the RECLAIMING entry over.
 *
 * Variants (-D flags): OLD_PROTOCOL is the protocol as of 4c4094f (layout
 * v1: CRC over the payload only, CommitWrite stores the CRC before and
 * regardless of its CAS, BeginWrite writes key and tag after the claim
 * without a re-check, tags cleared before the freeing CAS). Without it, the
 * layout v2 protocol; UNBOUND_CRC is v2 without the CRC trailer (the
 * ownership checks alone). CHECK_READS_ONLY keeps only the reader property (the
 * old-protocol run that must find defect 1 reports nothing else first);
 * CHECK_SETTLE_ONLY keeps only the end-state properties (slots settle, keys
 * stay storable).
 *
 * Every step names the failpoint (marked `@fp`, a CXLKV_FAILPOINT_HIT name)
 * or the C++ function (marked `@fn`) of src/region/ it stands for;
 * scripts/check-model-names.sh checks that each still exists there.
 */

#ifndef NP
#define NP 2
#endif
#ifndef NSLOT
#define NSLOT 1
#endif
#ifndef NK
#define NK 2
#endif
#ifndef OPS
#define OPS 2
#endif
#ifndef OPS0
#define OPS0 OPS  /* P0's operations (an asymmetric bound: P0 fewer) */
#endif
#ifndef SBSZ
#define SBSZ 2
#endif
#ifndef CRASHES
#define CRASHES 1
#endif
#ifndef PAUSES
#define PAUSES 1
#endif
#ifndef RCRASHES
#define RCRASHES 0
#endif

#define R NP             /* the reclaimer's participant index */
#define NPROC (NP + 1)
#define NBUF NP          /* workers have store buffers; the reclaimer is SC */
#define NONE 255

/* Slot state word [generation][owner][state] (layout.h SlotState). */
#define S_FREE 0
#define S_WRITING 1
#define S_READY 2
#define S_EVICTING 3
/* Participant state word (layout.h ParticipantState). */
#define P_FREE 0
#define P_ACTIVE 1
#define P_RECLAIMING 2
/* Store outcomes (region.h StoreOutcome). */
#define O_NONE 0
#define O_STORED 1
#define O_DUP 2
#define O_LOSTRACE 3
#define O_FULL 4
#define O_FENCED 5

/* Plain-stored words of slot s, as indexes into mem[]: the key fields
 * (key_hi, key_lo, ns and len are stored and checked alike: one word here),
 * the CRC word, the payload, the set tag of its way. */
#define A_KEY(s) ((s) * 4)
#define A_CRC(s) ((s) * 4 + 1)
#define A_DATA(s) ((s) * 4 + 2)
#define A_TAG(s) ((s) * 4 + 3)

/* "Bytes" are a tag (writer, generation of its lease, key): a payload is
 * equal to another only if it is the same writer's copy for the same lease.
 * 0 = bytes nobody wrote. Keys are 1..NK and the set tag of key k is k. */
#define TOK(w, g, k) ((((w) * 16) + (g)) * 4 + (k))
#define TOKKEY(t) ((t) % 4)
/* The CRC as a value: CRC32C collisions are not modelled, so the CRC of a
 * payload is the payload's tag. Layout v2 extends it with the trailer
 * (generation, key); v1 covers the payload only. */
#if defined(OLD_PROTOCOL) || defined(UNBOUND_CRC)
#define CRCV(t, g, k) (t)
#else
#define CRCV(t, g, k) ((t) + 256 * ((g) * 4 + (k)))
#endif

short mem[NSLOT * 4];
byte sst[NSLOT];   /* slot state word: state */
byte sgen[NSLOT];  /*                  generation */
byte sown[NSLOT];  /*                  owner */
byte pin[NSLOT];   /* pin word: bit p = participant p pins the slot */
byte pst[NPROC];   /* participant state word (incarnations never repeat:
                      no entry is re-registered in this model) */
bool crashed[NPROC];
byte ndone;        /* workers finished or crashed */
byte crashmask;  /* workers that may crash (once each): chosen in init */
byte pause_budget = PAUSES;
byte rcrash_budget = RCRASHES;
short ready_tok[NSLOT];  /* ghost: the payload tag the commit of the slot's
                          current generation published */

#include "tso.pml"

/* A crash point: the worker stops forever here (its buffered stores still
 * drain). */
/* The choice reads only a local (mayfail), so partial-order reduction
 * still applies around it. */
#define FP \
  if \
  :: mayfail -> goto crashed_ \
  :: true \
  fi

/* Atomic load of the whole state word. */
inline LOADW(s) {
  d_step { wg = sgen[s]; wo = sown[s]; ws = sst[s] }
}

/* compare_exchange_strong on the state word (a locked instruction). */
inline CASW(s, eg, eo, es, ng, no, ns, ok) {
  DRAIN(me);
  d_step {
    if
    :: sgen[s] == eg && sown[s] == eo && sst[s] == es ->
       sgen[s] = ng; sown[s] = no; sst[s] = ns; ok = true
    :: else -> ok = false
    fi
  }
}

/* @fn RegionImpl::ClearTag: CAS tag -> 0. */
inline CLEARTAG(s, tag) {
  DRAIN(me);
  d_step {
    if
    :: mem[A_TAG(s)] == tag -> mem[A_TAG(s)] = 0
    :: else
    fi
  }
}

/* @fn RegionImpl::Find: tag hint, then state, key, state again. */
inline FIND(k, readable_only) {
  fs = NONE;
  s = 0;
  do
  :: s < NSLOT ->
     LD(me, A_TAG(s), t);
     if
     :: t == k ->
        LOADW(s);
        if
        :: ws == S_READY || ws == S_EVICTING || (!readable_only && ws == S_WRITING) ->
           /* @fn RegionImpl::KeyMatches */
           LD(me, A_KEY(s), t);
           if
           :: t == k ->
              d_step {
                t = (sgen[s] == wg && sown[s] == wo && sst[s] == ws);
                if
                :: t -> fs = s; fg = wg; fo = wo; fst = ws
                :: else
                fi
              }
              if
              :: fs != NONE -> break
              :: else
              fi
           :: else
           fi
        :: else
        fi
     :: else
     fi;
     s++
  :: else -> break
  od;
  t = 0
}

/* @fn RegionImpl::TakeReadySlot: READY -> EVICTING(evictor), then the pin
 * check; a pin restores the exact READY word. */
inline TAKE_READY(s, g, o, ok) {
  CASW(s, g, o, S_READY, g, me, S_EVICTING, ok);
  if
  :: ok ->
     printf("MSC: P%d takes slot %d (READY gen %d) to evict it\n", me, s, g);
#ifndef OLD_PROTOCOL
     /* @fp evict.after_take (v2; v1 has the step, not the failpoint) */
#endif
     FP;
     /* @fn RegionImpl::SlotPinned */
     if
     :: pin[s] != 0 ->
        FP;
        CASW(s, g, me, S_EVICTING, g, o, S_READY, t);
        t = 0;
        ok = false
     :: else
     fi
  :: else
  fi
}

/* @fn RegionImpl::ClaimSlot: a free way first (in way order), else the
 * least recently used READY way. The recency (last_use) is not modelled:
 * any READY way may be passed over, so every order the policy can produce
 * is covered. */
inline CLAIM(k) {
  claimed = false;
  s = 0;
  do
  :: s < NSLOT ->
     LOADW(s);
     if
     :: ws == S_FREE ->
        CASW(s, wg, wo, S_FREE, wg + 1, me, S_WRITING, ok);
        if
        :: ok -> claimed = true; myslot = s; mygen = wg + 1; break
        :: else
        fi
     :: else
     fi;
     s++
  :: else -> break
  od;
#ifndef OLD_PROTOCOL
  /* v2: before evicting anything, a READY copy of the key whose tag was
     lost (Find skipped it) is looked for ignoring tags: fs, fg, fo. */
  s = 0;
  do
  :: !claimed && s < NSLOT ->
     LOADW(s);
     if
     :: ws == S_READY ->
        LD(me, A_KEY(s), t);
        if
        :: t == k ->
           d_step {
             if
             :: sgen[s] == wg && sown[s] == wo && sst[s] == ws -> fs = s; fg = wg; fo = wo; fst = ws
             :: else
             fi
           }
        :: else
        fi;
        t = 0
     :: else
     fi;
     if
     :: fs != NONE -> break
     :: else -> s++
     fi
  :: else -> break
  od;
#endif
  if
  :: !claimed && fs == NONE ->
     select (start : 0 .. NSLOT - 1);
     c = 0;
     do
     :: c < 2 * NSLOT && !claimed ->
        s = (start + c) % NSLOT;
        LOADW(s);
        if
        :: ws == S_READY ->
           if
           :: c < NSLOT -> skip  /* eviction order: any way may be passed over */
           :: pin[s] != 0 -> skip  /* SlotPinned pre-check */
           :: pin[s] == 0 ->
              TAKE_READY(s, wg, wo, ok);
              if
              :: ok ->
                 FP;
                 CASW(s, wg, me, S_EVICTING, wg + 1, me, S_WRITING, ok);
                 if
                 :: ok -> claimed = true; myslot = s; mygen = wg + 1
                 :: else
                 fi
              :: else
              fi
           fi
        :: else
        fi;
        c++
     :: else -> break
     od;
     start = 0; c = 0
  :: else
  fi;
  s = 0;
  wg = 0; wo = 0; ws = 0
}

/* The writer still owns its slot: the state word equals its WRITING word
 * (v2: before every metadata store). */
#define OWNS (sgen[myslot] == mygen && sown[myslot] == me && sst[myslot] == S_WRITING)

/* @fn RegionImpl::ReleaseOwnedSlot */
inline RELEASE_OWNED() {
#ifdef OLD_PROTOCOL
  /* v1: tag 0 stored before the CAS, whether or not we still own it. */
  ST(me, A_TAG(myslot), 0);
  FP;
  CASW(myslot, mygen, me, S_WRITING, mygen, 0, S_FREE, ok);
#else
  /* v2: read the tag, check ownership, clear the tag while owning, free. */
  LD(me, A_TAG(myslot), t);
  FP;
  if
  :: OWNS ->
     FP;
     CLEARTAG(myslot, t);
     FP;
     CASW(myslot, mygen, me, S_WRITING, mygen, 0, S_FREE, ok)
  :: else
  fi;
  t = 0
#endif
}

#ifndef OLD_PROTOCOL
/* @fn RegionImpl::TakeAndFreeSlot: CAS word -> WRITING(gen+1, us), then
 * release it as its owner (v2: freeing a slot that is not ours). */
inline TAKE_AND_FREE(s, g, o, st) {
  CASW(s, g, o, st, g + 1, me, S_WRITING, ok);
  if
  :: ok ->
     printf("MSC: P%d takes slot %d (gen %d) to free it\n", me, s, g);
     myslot = s; mygen = g + 1;
     FP;
     RELEASE_OWNED();
     myslot = 0; mygen = 0
  :: else
  fi;
  ok = false
}

/* @fn RegionImpl::RepairTag: set the tag of a READY slot that lost it, if
 * the slot still holds the word seen. */
inline REPAIR_TAG(s, g, o, tag) {
  LD(me, A_TAG(s), t);
  if
  :: t != tag ->
     FP;
     if
     :: sgen[s] == g && sown[s] == o && sst[s] == S_READY ->
        FP;
        DRAIN(me);
        d_step {
          if
          :: mem[A_TAG(s)] == t -> mem[A_TAG(s)] = tag
          :: else
          fi
        }
     :: else
     fi
  :: else
  fi;
  t = 0
}
#endif

/* A metadata store by a writer: v2 checks ownership first (the residual
 * window between the check and the store is what the CRC binding makes
 * harmless). */
#ifdef OLD_PROTOCOL
#define META_ST(addr, val) ST(me, addr, val)
#else
#define META_ST(addr, val) \
  if \
  :: OWNS -> FP; ST(me, addr, val) \
  :: else -> lost = true \
  fi
#endif

/* @fn RegionImpl::CommitWrite. from_source: the CRC comes from the
 * writer's source (Store, the GPU path with gpu_crc); else it is computed
 * over the slot's bytes (the GPU path without gpu_crc). */
inline COMMIT(from_source) {
  if
  :: from_source -> crc = CRCV(mytok, mygen, k)
  :: else ->
     LD(me, A_DATA(myslot), crc);
     printf("MSC: P%d CommitWrite(nullptr): CRC over the bytes now in slot %d\n", me, myslot);
     crc = CRCV(crc, mygen, k)
  fi;
  FP;
  lost = false;
  META_ST(A_CRC(myslot), crc);
  if
  :: !lost -> printf("MSC: P%d stores the CRC of slot %d\n", me, myslot)
  :: lost -> printf("MSC: P%d: slot %d is no longer its own, no CRC stored\n", me, myslot)
  fi;
  crc = 0;
  /* @fp write.before_commit */
  FP;
  DRAIN(me);
  d_step {
    if
    :: OWNS ->
       sst[myslot] = S_READY; ready_tok[myslot] = mytok; outcome = O_STORED;
       printf("MSC: P%d commits slot %d gen %d key %d\n", me, myslot, mygen, k)
    :: else ->
       outcome = O_FENCED;
       printf("MSC: P%d commit CAS fails: slot %d is no longer its gen %d\n", me, myslot, mygen)
    fi
  }
}

/* @fn RegionImpl::Store, @fn RegionImpl::BeginWrite and the lease path. */
inline STORE(k) {
  outcome = O_NONE;
  FP;
  /* @fn RegionImpl::CheckWritable (@fn RegionImpl::StillRegistered) */
  if
  :: pst[me] != P_ACTIVE -> outcome = O_FENCED
  :: else ->
     FP;
     FIND(k, false);
     if
     :: fs != NONE && fst == S_READY -> outcome = O_DUP
     :: fs != NONE && fst != S_READY -> outcome = O_LOSTRACE
     :: fs == NONE ->
#ifndef OLD_PROTOCOL
        /* @fp write.before_claim (v2; v1 has the step, not the failpoint) */
#endif
        FP;
        CLAIM(k);
        if
#ifndef OLD_PROTOCOL
        :: !claimed && fs != NONE ->
           /* the untagged READY copy: repair its tag, answer duplicate */
           printf("MSC: P%d finds an untagged READY copy of key %d in slot %d\n", me, k, fs);
           FP;
           REPAIR_TAG(fs, fg, fo, k);
           outcome = O_DUP
#endif
        :: !claimed && fs == NONE -> outcome = O_FULL
        :: claimed ->
           assert(mygen < 16);
           mytok = TOK(me, mygen, k);
           printf("MSC: P%d claims slot %d gen %d for key %d\n", me, myslot, mygen, k);
           /* @fp write.after_claim */
           FP;
           lost = false;
#ifndef OLD_PROTOCOL
           /* v2: reclaimed before the claim CAS? Give the slot back. */
           if
           :: pst[me] != P_ACTIVE ->
              printf("MSC: P%d finds itself reclaimed after its claim\n", me);
              FP;
              RELEASE_OWNED();
              outcome = O_FENCED;
              lost = true
           :: else
           fi;
#endif
           if
           :: !lost ->
              META_ST(A_KEY(myslot), k);
              FP;
              if
              :: !lost -> META_ST(A_TAG(myslot), k)
              :: else
              fi;
              if
              :: !lost -> printf("MSC: P%d stores key %d and tag into slot %d\n", me, k, myslot)
              :: else
              fi;
              if
              :: lost -> outcome = O_FENCED  /* LostSlot: our slot was taken */
              :: else
              fi
           :: else
           fi;
           FP;
           /* The seq_cst fence before the duplicate scan (ignoring tags). */
           DRAIN(me);
           s = 0;
           do
           :: lost || s >= NSLOT -> break
           :: !lost && s < NSLOT && s == myslot -> s++
           :: !lost && s < NSLOT && s != myslot ->
              LOADW(s);
              if
              :: ws == S_READY || ws == S_WRITING ->
                 LD(me, A_KEY(s), t);
                 if
#ifdef OLD_PROTOCOL
                 :: t == k && (ws == S_READY || s < myslot) -> lost = true; outcome = O_LOSTRACE
#else
                 :: t == k && ws == S_READY -> lost = true; outcome = O_DUP; c = s
                 :: t == k && ws == S_WRITING && s < myslot -> lost = true; outcome = O_LOSTRACE
#endif
                 :: else
                 fi
              :: else
              fi;
              if
              :: !lost -> s++
              :: else
              fi
           od;
           t = 0;
           if
           :: lost && outcome != O_FENCED ->
              FP;
              RELEASE_OWNED();
#ifndef OLD_PROTOCOL
              /* A READY copy wins: answer duplicate, repairing its tag. */
              if
              :: outcome == O_DUP -> FP; REPAIR_TAG(c, wg, wo, k)
              :: else
              fi;
#endif
              c = 0
           :: lost && outcome == O_FENCED
           :: !lost ->
              /* The lease is open: fill, then commit or abort (the prober
                 always stores). */
              if
              :: /* Store / GPU path: copy (or DMA), commit with the
                    source's CRC */
                 FP;
                 printf("MSC: P%d copies its payload into slot %d\n", me, myslot);
                 ST(me, A_DATA(myslot), mytok);
                 /* @fp write.mid_copy */
                 FP;
                 COMMIT(true)
#ifndef NO_REGION_CRC
              :: me < NP ->  /* GPU path without gpu_crc: DMA, then
                                CommitWrite(nullptr) */
                 FP;
                 printf("MSC: P%d copies its payload into slot %d\n", me, myslot);
                 ST(me, A_DATA(myslot), mytok);
                 FP;
                 COMMIT(false)
#endif
              :: me < NP ->  /* @fn RegionImpl::AbortWrite (or a dropped lease) */
                 FP;
                 printf("MSC: P%d aborts its write of slot %d\n", me, myslot);
                 RELEASE_OWNED();
                 outcome = O_NONE
              fi
           fi;
           s = 0; wg = 0; wo = 0; ws = 0
        fi
     fi
  fi;
  fs = NONE; fg = 0; fo = 0; fst = 0; myslot = 0; mygen = 0; mytok = 0; claimed = false;
  lost = false; ok = false
}

/* @fn RegionImpl::PinSlot (Dekker with TakeReadySlot: fetch_or, then the
 * state word; the evictor CASes, then reads the pins). */
inline PINSLOT(s, g, pinned) {
  pinned = false;
#ifndef OLD_PROTOCOL
  /* @fp pin.before_pin (v2; v1 has the step, not the failpoint) */
#endif
  FP;
  DRAIN(me);
  d_step { t = pin[s] & (1 << me); pin[s] = pin[s] | (1 << me) }
#ifndef OLD_PROTOCOL
  /* @fp pin.after_pin (v2; v1 has the step, not the failpoint) */
#endif
  FP;
#ifndef OLD_PROTOCOL
  /* v2: judged dead before our bit landed? Take it back if we set it. */
  if
  :: pst[me] != P_ACTIVE ->
     if
     :: t == 0 -> FP; DRAIN(me); d_step { pin[s] = pin[s] & ~(1 << me) }
     :: else
     fi;
     t = 0;
     goto pin_done
  :: else
  fi;
#endif
  t = 0;
  do
  :: LOADW(s);
     if
     :: wg != g -> break
     :: wg == g && ws == S_READY -> pinned = true; break
     :: wg == g && ws != S_READY && ws != S_EVICTING -> break
     :: wg == g && ws == S_EVICTING ->
        /* @fn RegionImpl::ParticipantActive */
        if
        :: pst[wo] != P_ACTIVE -> break
        :: pst[wo] == P_ACTIVE ->
           if
           :: skip    /* spin while the evictor decides */
           :: break   /* kEvictWait elapsed */
           fi
        fi
     fi
  od;
  wg = 0; wo = 0; ws = 0;
  if
  :: !pinned ->
     FP;
     DRAIN(me);
     d_step { pin[s] = pin[s] & ~(1 << me) }
  :: else
  fi;
pin_done:
  skip
}

/* @fn RegionImpl::ForceDropSlot: a CRC failure frees the block. */
inline FORCEDROP(s) {
#ifndef OLD_PROTOCOL
  printf("MSC: P%d: CRC check of slot %d fails, drops it\n", me, s);
  TAKE_AND_FREE(s, fg, fo, fst)
#else
  LD(me, A_TAG(s), t);
  FP;
  CASW(s, fg, fo, fst, fg, 0, S_FREE, ok);
  if
  :: ok -> printf("MSC: P%d drops slot %d (CRC failure)\n", me, s); FP; CLEARTAG(s, t)
  :: else
  fi;
  t = 0; ok = false
#endif
}

/* @fn RegionImpl::Load (keycheck) and @fn RegionImpl::BeginRead /
 * @fn RegionImpl::EndRead (no key re-check after the copy). */
inline LOAD(k) {
  hit = false;
  FP;
  FIND(k, true);
  if
  :: fs == NONE
  :: fs != NONE ->
     LD(me, A_CRC(fs), crc);
     FP;
     participant = (pst[me] == P_ACTIVE);
     pinned = false;
     if
     :: participant -> FP; PINSLOT(fs, fg, pinned)
     :: else
     fi;
     if
     :: participant && !pinned
     :: !participant || pinned ->
        FP;
        LD(me, A_DATA(fs), got);  /* the copy */
        /* @fp read.mid_copy */
        FP;
        /* @fn SameReadableBlock */
        d_step {
          unchanged = (sgen[fs] == fg && (sst[fs] == S_READY || sst[fs] == S_EVICTING));
          snap = ready_tok[fs]
        }
        if
        :: keycheck -> LD(me, A_KEY(fs), t); unchanged = unchanged && (t == k); t = 0
        :: !keycheck
        fi;
        if
        :: pinned ->
           FP;
           /* @fn RegionImpl::UnpinSlot */
           if
           :: pst[me] == P_ACTIVE -> DRAIN(me); d_step { pin[fs] = pin[fs] & ~(1 << me) }
           :: else
           fi
        :: else
        fi;
        if
        :: !unchanged -> printf("MSC: P%d misses key %d: slot %d changed\n", me, k, fs)
        :: unchanged && CRCV(got, fg, k) != crc -> FP; FORCEDROP(fs)
        :: unchanged && CRCV(got, fg, k) == crc ->
           printf("MSC: P%d hit key %d slot %d gen %d: bytes of P%d gen %d key %d\n",
                  me, k, fs, fg, got / 64, (got / 4) % 16, TOKKEY(got));
           /* The property: a hit is the bytes the current owner stored for
              the key asked. */
#ifndef CHECK_SETTLE_ONLY
           assert(got == snap && TOKKEY(got) == k);
#endif
           hit = true
        fi
     fi
  fi;
  fs = NONE; fg = 0; fo = 0; fst = 0; got = 0; crc = 0; snap = 0; unchanged = false;
  participant = false; pinned = false
}

#define OPLOCALS \
  byte k, s, t, c, start, wg, wo, ws, fs = NONE, fg, fo, fst, myslot, mygen, outcome; \
  bool ok, claimed, lost, pinned, participant, unchanged, hit, keycheck, mayfail; \
  short got, crc, snap, mytok

proctype Worker(byte me) {
  OPLOCALS;
  byte op;
  mayfail = (crashmask >> me) & 1;
  do
  :: op < (me == 0 -> OPS0 : OPS) ->
     op++;
     select (k : 1 .. NK);
     if
     :: STORE(k)
     :: keycheck = true; LOAD(k)
#ifdef OLD_PROTOCOL
     :: keycheck = false; LOAD(k)  /* v1 EndRead: no key re-check */
#endif
     fi;
     k = 0; outcome = O_NONE; hit = false; keycheck = false
  :: else -> break
  od;
  goto finish;
crashed_:
  printf("MSC: P%d crashes\n", me);
  crashed[me] = true;
finish:
  ndone++
}

/* Judged dead: crashed, or (pause budget) paused, at any step. Its store
 * buffer has drained by then: a buffer drains within microseconds, the
 * liveness timeout is at least 100 ms of an unchanged heartbeat. (A late
 * DMA of a paused writer is its payload store after it resumes.) */
#define CANRECLAIM(i) \
  ((i) < NP && sb[(i) % NBUF].n == 0 && \
   ((pst[i] == P_ACTIVE && (crashed[i] || pause_budget > 0)) || pst[i] == P_RECLAIMING))
/* Still to be reclaimed once every worker has stopped. */
#define MUSTRECLAIM(i) \
  ((i) < NP && (pst[i] == P_RECLAIMING || (pst[i] == P_ACTIVE && crashed[i])))
#define RFP \
  if \
  :: rcrash_budget > 0 -> rcrash_budget--; printf("MSC: reclaimer dies mid-sweep\n"); goto r_restart \
  :: true \
  fi

/* @fn RegionImpl::SweepParticipant */
inline SWEEP(i) {
  s = 0;
  do
  :: s < NSLOT ->
     LOADW(s);
     if
     :: ws == S_WRITING && wo == i ->
#ifdef OLD_PROTOCOL
        LD(me, A_TAG(s), t);
        RFP;
        CASW(s, wg, wo, ws, wg, 0, S_FREE, ok);
        if
        :: ok -> printf("MSC: reclaimer frees slot %d (P%d was writing it)\n", s, i); CLEARTAG(s, t)
        :: else
        fi
#else
        RFP;
        TAKE_AND_FREE(s, wg, wo, ws)
#endif
     :: ws == S_EVICTING && wo == i ->
#ifdef OLD_PROTOCOL
        CASW(s, wg, wo, ws, wg, i, S_READY, ok)
#else
        /* back to READY with the writer the slot recorded */
        CASW(s, wg, wo, ws, wg, ready_tok[s] / 64, S_READY, ok)
#endif
     :: else
     fi;
     t = 0; ok = false; wg = 0; wo = 0; ws = 0;
     RFP;
     if
     :: pin[s] & (1 << i) -> d_step { pin[s] = pin[s] & ~(1 << i) }
     :: else
     fi;
     /* @fp reclaim.mid_sweep */
     RFP;
     s++
  :: else -> break
  od;
  s = 0
}

#ifndef OLD_PROTOCOL
/* Orphans (v2): a WRITING/EVICTING slot or a pin bit whose owner's entry is
 * not alive (FREE: reclaimed before its claim or pin landed). */
#define DEADBITS ((pst[0] == P_FREE) * 1 + (pst[1] == P_FREE) * 2 + (pst[2] == P_FREE) * 4)
#define ORPHAN(s) \
  ((s) < NSLOT && ((((sst[s] == S_WRITING || sst[s] == S_EVICTING) && pst[sown[s]] == P_FREE)) || \
                   (pin[s] & DEADBITS) != 0))

/* @fn RegionImpl::SweepOrphans, for slot s. The engine acts on a word only
 * after seeing it unchanged for a liveness timeout; the model may act at
 * any moment after the owner stopped being alive (more behaviours). */
inline ORPHAN_SWEEP(s) {
  LOADW(s);
  if
  :: (ws == S_WRITING || ws == S_EVICTING) && pst[wo] == P_FREE ->
     printf("MSC: orphan sweep: slot %d's owner P%d is not alive\n", s, wo);
     if
     :: ws == S_EVICTING -> CASW(s, wg, wo, ws, wg, ready_tok[s] / 64, S_READY, ok)
     :: ws == S_WRITING -> TAKE_AND_FREE(s, wg, wo, ws)
     fi
  :: else
  fi;
  d_step {
    t = pin[s] & DEADBITS;
    pin[s] = pin[s] & ~t;
    t = 0
  }
  wg = 0; wo = 0; ws = 0; ok = false
}
#endif

/* The heartbeat thread of a live participant: @fn RegionImpl::ReapDead
 * judges, @fn RegionImpl::TryReclaim reclaims. At the end (every worker
 * finished or crashed, every store buffer drained) it checks that every
 * slot settled and probes every key. */
proctype Reclaimer() {
  OPLOCALS;
  byte i, me = R;
r_restart:
  do
  :: CANRECLAIM(0) -> i = 0; goto reclaim
  :: CANRECLAIM(1) -> i = 1; goto reclaim
  :: CANRECLAIM(2) -> i = 2; goto reclaim
#ifndef OLD_PROTOCOL
  :: ORPHAN(0) -> s = 0; ORPHAN_SWEEP(s); s = 0
  :: ORPHAN(1) -> s = 1; ORPHAN_SWEEP(s); s = 0
#endif
  :: ndone == NP && !MUSTRECLAIM(0) && !MUSTRECLAIM(1) && !MUSTRECLAIM(2) -> break
  od;
  goto finale;
reclaim:
  skip;
  /* The liveness judgement and the CAS ACTIVE -> RECLAIMING. */
  d_step {
    if
    :: pst[i] == P_ACTIVE ->
       pst[i] = P_RECLAIMING;
       if
       :: !crashed[i] -> pause_budget--; printf("MSC: P%d paused past the liveness timeout\n", i)
       :: else
       fi;
       printf("MSC: reclaimer reclaims P%d\n", i);
       ok = true
    :: pst[i] == P_RECLAIMING -> ok = true  /* a dead reclaimer's sweep: taken over */
    :: else -> ok = false
    fi
  }
  if
  :: ok -> SWEEP(i); pst[i] = P_FREE
  :: else
  fi;
  ok = false; i = 0;
  goto r_restart;

finale:
  /* Quiescence: nothing runs any more but this participant. */
  (sb[0].n == 0 && sb[1].n == 0 && sb[NBUF - 1].n == 0);
#ifndef OLD_PROTOCOL
  /* The stall timeout has passed for every orphan left. */
  s = 0;
  do
  :: s < NSLOT -> ORPHAN_SWEEP(s); s++
  :: else -> break
  od;
#endif
#ifndef CHECK_READS_ONLY
  /* After crashes every slot becomes FREE or READY again. */
  s = 0;
  do
  :: s < NSLOT ->
     assert(sst[s] == S_FREE || sst[s] == S_READY);
     s++
  :: else -> break
  od;
  /* Every key stays storable: a store, then a load, hits within three
     rounds (a round may end in repairing a tag, dropping a block a zombie
     damaged, or evicting). */
  k = 1;
  do
  :: k <= NK ->
     c = 0;
     do
     :: c < 3 ->
        STORE(k);
        keycheck = true;
        LOAD(k);
        if
        :: hit -> break
        :: else -> c++
        fi
     :: else -> break
     od;
     printf("MSC: probe of key %d: hit %d\n", k, hit);
     assert(hit);
     k++
  :: else -> break
  od;
#endif
  goto end_done;
crashed_:  /* the reclaimer never crashes in an operation (FP needs the label) */
end_done:
  skip
}

init {
  byte i;
  atomic {
#if CRASHES >= 2
    crashmask = (1 << NP) - 1;
#elif CRASHES == 1
    select (i : 0 .. NP - 1);
    crashmask = 1 << i;
#endif
    i = 0;
    do
    :: i < NPROC -> pst[i] = P_ACTIVE; i++
    :: else -> break
    od;
    i = 0;
    do
    :: i < NBUF -> run Flusher(i); i++
    :: else -> break
    od;
    i = 0;
    do
    :: i < NP -> run Worker(i); i++
    :: else -> break
    od;
    i = 0;
    run Reclaimer()
  }
}
