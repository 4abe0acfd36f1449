"""tileprobe.audit.jobs.int_class: a runtime int is compiled at one representative of what Triton's own binder
(triton._C.libtriton.native_specialize_impl, the function JITFunction's binder calls) keeps of it; checked against
that binder on random ints of every width, specialised or not. (That whole launches keep their bytes is checked by
each entry's "Triton's own bytes" test, which compiles the real arguments.)"""

from __future__ import annotations

import pytest
from triton._C.libtriton import native_specialize_impl
from triton.backends.compiler import BaseBackend

from tileprobe.audit.jobs import int_class

pytestmark = pytest.mark.triton


def test_an_int_keeps_exactly_what_tritons_binder_keeps(rng):
    edges = [0, 1, -1, 16, -16, 17, 2**31 - 1, 2**31, -2**31, -2**31 - 1, 2**63 - 1, 2**63, 2**64 - 1]
    values = edges + [rng.randint(-2**40, 2**40) for _ in range(3000)] + [rng.randint(2**31, 2**64 - 1)
                                                                          for _ in range(300)]
    values += [16 * rng.randint(1, 2**35) for _ in range(300)]
    for v in values:
        for specialize in (True, False):
            want = native_specialize_impl(BaseBackend, v, False, specialize, True)
            got = native_specialize_impl(BaseBackend, int_class(v, specialize), False, specialize, True)
            assert got == want, (v, specialize, int_class(v, specialize))
    assert len({int_class(v) for v in values}) <= 7  # the classes: 1, and i32 / i64 / u64 with or without 16 | v
