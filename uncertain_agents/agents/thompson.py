"""``ThompsonSampling``: act greedily with respect to one fresh posterior function per decision."""
from __future__ import annotations

import numpy as np

from .neural import PosteriorAgent

_FLOAT32 = np.dtype(np.float32)


class ThompsonSampling(PosteriorAgent):
    """Thompson sampling with any posterior of the registry.

    After each refit ``train_every`` functions are drawn at once; decision ``t`` uses the
    next unused one, ``argmax_a f_t(x)_a``, so every decision sees a fresh posterior
    function (more are drawn, again in one batch, if the schedule runs out).
    See :class:`PosteriorAgent` for the arguments.
    """

    name = "thompson"

    def act(self, context) -> int:
        # fast path: a float32 vector of the right length goes straight to the decision, which
        # checks it for NaN/inf on the first layer's output (HostFunctions.greedy)
        if not (type(context) is np.ndarray and context.dtype is _FLOAT32 and context.shape == self._shape):
            context = self._context(context)
        functions = self.functions
        # functions are drawn only after the round-robin warm-up (and the history only grows),
        # so while unused ones remain there is nothing else to check
        if functions is not None and self._cursor < functions.n:
            arm = functions.greedy(self._cursor, context)
            self._cursor += 1
            return arm
        arm = self._round_robin()
        if arm is not None:
            self._context(context)
            return arm
        self._draw(self.train_every)
        arm = self.functions.greedy(0, context)
        self._cursor = 1
        return arm
