// Starting gathered work (a batch, a coalesced read) now, or after one turn of the event loop so that the
// requests already received join it: for an embedded database (PGlite) whose statements run on the request's
// own thread, where a request's path never yields and every batch would otherwise hold one call.

/** A function that calls `start` now, or, when `gatherOneTurn()` says so, once after this turn however often it is called meanwhile. */
export function starter(start: () => void, gatherOneTurn: () => boolean | undefined): () => void {
  let scheduled = false;
  return () => {
    if (!gatherOneTurn()) return start();
    if (scheduled) return;
    scheduled = true;
    setImmediate(() => {
      scheduled = false;
      start();
    });
  };
}
