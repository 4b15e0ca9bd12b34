/* x86-TSO store buffers (included by slot_protocol.pml).
 *
 * The engine's plain stores (relaxed atomics and memcpy: key fields, set
 * tags, the CRC word, the payload) compile to MOV on x86 and sit in the
 * CPU's FIFO store buffer until it drains. Its locked instructions (every
 * CAS, fetch_or/fetch_and/exchange) and MFENCE (std::atomic_thread_fence(
 * seq_cst)) drain the buffer first. Loads read the newest own buffered store
 * to the same address, else memory. Acquire/release fences and seq_cst loads
 * are plain MOVs and need nothing here: TSO never reorders load->load,
 * store->store or load->store.
 *
 * Each buffered participant has a Flusher process that commits its oldest
 * buffered store at any moment, also while the participant is paused or
 * after it crashed (the hardware drains the buffer either way).
 */

typedef SBuf {
  byte a[SBSZ];  /* address (index into mem[]) */
  short v[SBSZ];  /* value */
  byte n         /* entries in use, oldest at 0 */
};
SBuf sb[NBUF];
byte sbi;  /* scratch for d_steps; always reset to 0 after use */

/* Plain store. A full buffer stalls the CPU until its Flusher drains one. */
#ifdef NO_TSO
#define BUFFERED(p) 0
#else
#define BUFFERED(p) ((p) < NBUF)
#endif
inline ST(p, addr, val) {
  if
  :: BUFFERED(p) ->
     atomic {
       sb[p].n < SBSZ ->
       sb[p].a[sb[p].n] = addr;
       sb[p].v[sb[p].n] = val;
       sb[p].n++
     }
  :: else -> mem[addr] = val  /* unbuffered (the reclaimer; -DNO_TSO): SC */
  fi
}

/* Plain load: own buffer (newest first), else memory. */
inline LD(p, addr, dst) {
  d_step {
    dst = mem[addr];
    if
    :: p < NBUF ->
       sbi = sb[p].n;
       do
       :: sbi > 0 ->
          sbi--;
          if
          :: sb[p].a[sbi] == addr -> dst = sb[p].v[sbi]; break
          :: else
          fi
       :: else -> break
       od;
       sbi = 0
    :: else
    fi
  }
}

/* Commit the oldest buffered store to memory. */
inline FLUSH1(p) {
  d_step {
    sb[p].n > 0;  /* guard: blocks on an empty buffer */
    mem[sb[p].a[0]] = sb[p].v[0];
    sbi = 0;
    do
    :: sbi + 1 < sb[p].n ->
       sb[p].a[sbi] = sb[p].a[sbi + 1];
       sb[p].v[sbi] = sb[p].v[sbi + 1];
       sbi++
    :: else -> break
    od;
    sb[p].n--;
    sb[p].a[sb[p].n] = 0;
    sb[p].v[sb[p].n] = 0;
    sbi = 0
  }
}

/* A locked instruction or MFENCE waits until the Flusher has drained the
 * buffer, one store at a time (others may observe each one as it lands). */
inline DRAIN(p) {
  if
  :: p < NBUF -> sb[p].n == 0
  :: else
  fi
}

proctype Flusher(byte p) {
end_flush:
  do
  :: FLUSH1(p)
  od
}
