"""Call every function and method of a package with small arrays, and name those that compute a dense layer's backward.

Run by tests/test_edition.py in a fresh interpreter, once on the homework edition and once on sgrad itself::

    python -I -S tests/find_dense_backward.py PACKAGE_FOLDER SITE_PACKAGES MODULE...

and prints ``{"found": [...], "ran": [...]}`` as JSON: the callables (``module.Class.method``, named where they
are defined) caught computing a dense layer's backward, and those that returned at least once.

What gives a dense layer's backward away, whatever the other factor: its weight gradient xᵀ·D has every column
in the span of x's rows, and its input delta D·Wᵀ has every row in the span of W's columns.  With a batch of 3
rows of 7 inputs and 5 outputs, neither happens by chance to an array of another origin.  So every array that a
call returns, or leaves in the objects it was given (and every change it makes to one of their arrays), is
tested against each input x and each weight matrix W in sight: the arrays made here, and those that the
objects hold as ``input``, ``columns`` or ``weights``.  A 1×1 convolution's arrays are tested as the dense ones
they are.  The first line of a backward pass, D ⊙ f'(h), is looked for too.  Arguments are chosen by the
parameter's name where it says what it takes (``weights``, ``output_delta``, ...), else from every array made
here; objects are built with a few usual signatures, and run forward before their methods are called.
"""

import copy
import importlib
import inspect
import itertools
import json
import sys

BATCH, INPUTS, OUTPUTS, CONDITION = 3, 7, 5, 2  # INPUTS = OUTPUTS + CONDITION: a generator's [h, c] is 7 wide too
TOLERANCE = 1e-9
MAX_CALLS = 300  # argument combinations tried per callable and number of arguments


def main():
    folder, site_packages, *modules = sys.argv[1:]
    sys.path[:0] = [folder]
    sys.path.append(site_packages)
    import numpy as np

    walk = Walk(np, [importlib.import_module(name) for name in modules])
    walk.run()
    print(json.dumps({"found": sorted(walk.found), "ran": sorted(walk.ran)}))


class Walk:
    def __init__(self, np, modules):
        self.np = np
        self.modules = modules
        self.roots = tuple({module.__name__.split(".")[0] for module in modules})
        self.found, self.ran = set(), set()
        rng = np.random.default_rng(0)
        x = rng.standard_normal((BATCH, INPUTS))
        weights = rng.standard_normal((INPUTS, OUTPUTS))
        delta, delta2 = rng.standard_normal((BATCH, OUTPUTS)), rng.standard_normal((BATCH, OUTPUTS))
        h = np.tanh(rng.standard_normal((BATCH, OUTPUTS)))
        c = rng.standard_normal((BATCH, CONDITION))
        bias = rng.standard_normal(OUTPUTS)
        x4, delta4 = x.reshape(BATCH, INPUTS, 1, 1), delta.reshape(BATCH, OUTPUTS, 1, 1)
        weights4 = rng.standard_normal((OUTPUTS, INPUTS, 1, 1))

        def tanh_deriv(out):
            return 1.0 - out * out

        def sigmoid_deriv(out):
            return out * (1.0 - out)

        def relu_deriv(out):
            return (out > 0).astype(out.dtype)

        self.derivatives = (tanh_deriv, sigmoid_deriv, relu_deriv)
        self.x, self.h, self.c, self.x4, self.delta4 = x, h, c, x4, delta4
        self.inputs = [x]  # (batch, inputs): every x whose xᵀ·D is looked for
        self.weights = [weights, self._as_dense_weights(weights4)]
        self.deltas, self.outputs = [delta, delta2], [h, delta, delta2]
        self.pool = [x, weights, bias, delta, delta2, h, c, x4, weights4, delta4, True, False, 0, 1, 0.1, None, (1, 1),
                     x4.shape, "tanh", np.tanh, tanh_deriv]
        named = {
            ("x", "input", "x_t", "h_prev", "columns", "joined", "a"): [x, x4],
            ("h", "out", "output", "h_t", "prediction", "c_prev", "c_t", "x_hat", "logits", "b"): [h, delta2],
            ("dz", "dh", "dout", "output_delta", "dh_t", "dc_t", "delta", "dprediction", "g_hat", "target",
             "target_gradient", "true_gradient", "d_windows"): [delta, delta4],
            ("grad",): [rng.standard_normal((INPUTS, OUTPUTS))],  # an update rule's: of its parameter's shape
            ("state",): [{}],
            ("weights", "weights_h", "weights_x", "param", "gamma", "init"): [weights, weights4],
            ("bias", "beta"): [bias, None],
            ("condition", "c"): [c, None],
            ("nonlin_deriv",): [tanh_deriv, sigmoid_deriv],
            ("nonlin",): ["tanh", np.tanh],
            ("with_bias", "input_delta", "mode"): [True, False],
            ("stride",): [1], ("padding",): [0], ("kernel", "kernel_size"): [(1, 1), 1],
            ("input_shape", "shape"): [x4.shape, (INPUTS, OUTPUTS)],
            ("alpha", "lr", "eps", "generator_alpha"): [0.1],
            ("gradients",): [{"weights": weights, "bias": bias}],
        }
        self.named = {name: values for names, values in named.items() for name in names}
        self.objects = []  # built objects, run forward: the arguments named module, generator, ...

    # --- what is looked for ---------------------------------------------------------------------------

    def _as_dense_weights(self, array):
        """A weight array as the (inputs, outputs) matrix of a dense layer; a convolution's (out, in, 1, 1) too."""
        if array.ndim == 4 and array.shape[2:] == (1, 1):
            return array.reshape(array.shape[0], -1).T
        return array if array.ndim == 2 else None

    def _views(self, array):
        """An array as the matrices a dense backward may have made: itself, and a 1×1 convolution's as rows."""
        if array.ndim == 2:
            return [array]
        if array.ndim == 4 and array.shape[2:] == (1, 1):
            rows = array.reshape(array.shape[0], -1)
            return [rows, rows.T]
        return []

    def _in_span(self, basis, matrix):
        """Whether every column of ``matrix`` lies in the span of ``basis``'s columns (and matrix is not zero)."""
        np = self.np
        norm = np.linalg.norm(matrix)
        if not np.isfinite(norm) or norm < 1e-12:
            return False
        solution = np.linalg.lstsq(basis, matrix, rcond=None)[0]
        return bool(np.linalg.norm(basis @ solution - matrix) <= TOLERANCE * norm)

    def is_dense_backward(self, array, inputs, weights, outputs):
        np = self.np
        if not isinstance(array, np.ndarray) or array.dtype.kind != "f":
            return False
        for view in self._views(array):
            for x in inputs:  # xᵀ·D: (inputs, q), q not the batch (that would be xᵀ itself)
                if x.shape[0] < x.shape[1] == view.shape[0] and view.shape[1] != x.shape[0] and self._in_span(x.T,
                                                                                                               view):
                    return True
            for w in weights:  # D·Wᵀ: (n, inputs), n not the outputs (that would be Wᵀ itself)
                if w.shape[1] < w.shape[0] == view.shape[1] and view.shape[0] != w.shape[1] and self._in_span(w,
                                                                                                               view.T):
                    return True
        if array.shape in {delta.shape for delta in self.deltas}:  # D ⊙ f'(h), the first line
            for delta in self.deltas:
                for out in outputs:
                    if out is delta or out.shape != array.shape:
                        continue
                    for derivative in self.derivatives:
                        slope = derivative(out)
                        if np.ptp(slope) > 0 and np.allclose(array, delta * slope, rtol=1e-12, atol=0):
                            return True  # (a constant slope would make D itself look like one)
        return False

    # --- arrays in sight ---------------------------------------------------------------------------------

    def arrays(self, value, path="", seen=None, depth=0):
        """``[(path, array)]`` for every array in ``value``: in tuples, lists, dicts and the package's objects."""
        np = self.np
        seen = set() if seen is None else seen
        if isinstance(value, np.ndarray):
            return [(path, value)]
        if id(value) in seen or depth > 40:
            return []
        seen.add(id(value))
        found = []
        if isinstance(value, (tuple, list)):
            for k, item in enumerate(value):
                found += self.arrays(item, f"{path}[{k}]", seen, depth + 1)
        elif isinstance(value, dict):
            for key, item in value.items():
                found += self.arrays(item, f"{path}.{key}", seen, depth + 1)
        elif type(value).__module__.split(".")[0] in self.roots and hasattr(value, "__dict__"):
            for key, item in vars(value).items():
                found += self.arrays(item, f"{path}.{key}", seen, depth + 1)
        return found

    def check_call(self, qualified, function, args, kwargs):
        np = self.np
        before = {path: array.copy() for path, array in self.arrays([list(args), kwargs])}
        try:
            with np.errstate(all="ignore"):
                result = function(*args, **kwargs)
        except Exception:
            return False
        self.ran.add(qualified)
        after = self.arrays([list(args), kwargs])
        named = [(path.rsplit(".", 1)[-1], array) for path, array in after]
        inputs = self.inputs + [a for name, a in named if name in ("input", "columns") and a.ndim == 2]
        weights = self.weights + [w for name, a in named if name == "weights" and (w := self._as_dense_weights(a))
                                  is not None]
        outputs = self.outputs + [a for name, a in named if name == "output"]
        old = list(before.values())

        def made_here(array):  # what the call made: state that was there before does not count
            return not any(o.shape == array.shape and np.array_equal(o, array) for o in old)

        candidates = [array for _, array in self.arrays(result) if made_here(array)]
        candidates += [array for path, array in after
                       if made_here(array) and not (path in before and np.array_equal(before[path], array))]
        candidates += [array - before[path] for path, array in after
                       if path in before and before[path].shape == array.shape and array.dtype.kind == "f"]
        if any(self.is_dense_backward(array, inputs, weights, outputs) for array in candidates):
            self.found.add(qualified)
        return True

    # --- calling everything ---------------------------------------------------------------------------------

    def candidates(self, parameter):
        if parameter.name == "generator":
            return [obj for obj in self.objects if hasattr(obj, "condition_dim") and not hasattr(obj, "backward")]
        if parameter.name in ("module", "block", "layer", "net"):
            return [obj for obj in self.objects if hasattr(obj, "backward") and hasattr(obj, "input_dim")]
        if parameter.name in ("tree", "trees"):
            return self.objects
        return self.named.get(parameter.name, self.pool)

    def argument_lists(self, function, skip_self):
        """``(args, kwargs)`` for ``function``: positional arguments from the named candidates, else from the whole
        pool, sampled; and the keyword-only ones left out, or each given its first named candidate."""
        try:
            parameters = list(inspect.signature(function).parameters.values())
        except (TypeError, ValueError):
            return []
        if skip_self:
            parameters = parameters[1:]
        positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        keywords = {p.name: self.named[p.name][0] for p in parameters if p.kind == p.KEYWORD_ONLY and p.name in self.named}
        required_keywords = {p.name: self.pool[0] for p in parameters
                             if p.kind == p.KEYWORD_ONLY and p.default is p.empty and p.name not in keywords}
        variants = [{**required_keywords}, {**required_keywords, **keywords}] if keywords else [required_keywords]
        required = sum(p.default is p.empty for p in positional)
        lists = []
        rng = self.np.random.default_rng(1)
        for count in range(required, min(len(positional), required + 2) + 1):
            choices = [self.candidates(p) for p in positional[:count]]
            if not all(choices):
                continue
            total = 1
            for options in choices:
                total *= len(options)
            if total <= MAX_CALLS:
                chosen = [list(combination) for combination in itertools.product(*choices)]
            else:
                chosen = [[options[rng.integers(len(options))] for options in choices] for _ in range(MAX_CALLS)]
            lists += [(args, kwargs) for args in chosen for kwargs in variants]
        return lists

    def call_all(self, qualified, function, prepared=None):
        """Call ``function`` (a method of ``prepared``, if given) with each argument list."""
        for args, kwargs in self.argument_lists(function, skip_self=prepared is not None):
            args, kwargs = copy.deepcopy((args, kwargs))
            if prepared is not None:
                args = [copy.deepcopy(prepared), *args]
            self.check_call(qualified, function, args, kwargs)

    def build_objects(self, classes):
        shapes = [(), (INPUTS, OUTPUTS, "tanh"), (INPUTS, OUTPUTS, "identity"), (OUTPUTS, CONDITION), (OUTPUTS,), (INPUTS,),
                  ("tanh",), (INPUTS, OUTPUTS, 1), ((INPUTS, 1, 1),), (1,)]
        options = [{"hidden": (4,), "batchnorm": False}, {"condition_dim": CONDITION, "generator_init": "blog"}, {},
                   {"init": "blog"}]
        built = {cls: [] for cls in classes}
        for cls, args, kwargs in itertools.product(classes, shapes, options):
            if len(built[cls]) < 2:
                self._build(built[cls], cls, args, kwargs)
        # what a container is built around: modules with weights first, as a Sequential of one Layer
        every = sorted((obj for objects in built.values() for obj in objects), key=lambda obj: not hasattr(obj, "weights"))
        for cls in classes:
            for args in ([([obj],) for obj in every] + [(obj,) for obj in every]
                         + list(itertools.product(every[:12], every[:12]))):
                if len(built[cls]) < 2:
                    self._build(built[cls], cls, args, {})
        self.objects = [obj for objects in built.values() for obj in objects]
        return built

    def _build(self, into, cls, args, kwargs):
        try:
            obj = cls(*copy.deepcopy(args), **kwargs)
        except Exception:
            return
        if sum(array.size for _, array in self.arrays(obj)) > 20_000:
            return  # a default-sized network: slow to copy for every call, and no different in kind
        self.prepare(obj)
        into.append(obj)

    def prepare(self, obj):
        """Run ``obj`` forward once, if it has a forward that takes one of the arrays made here."""
        forward = getattr(obj, "forward", None)
        if not callable(forward):
            return
        for args in [(self.x,), (self.x4,), (self.h,), (self.h, self.c), (self.x, self.c), (self.delta4,)]:
            try:
                forward(*args)
                return
            except Exception:
                continue

    def run(self):
        classes, functions = [], []
        for module in self.modules:
            for name, value in vars(module).items():
                if getattr(value, "__module__", None) != module.__name__:
                    continue
                if inspect.isclass(value) and not issubclass(value, BaseException):
                    classes.append(value)
                elif inspect.isfunction(value):
                    functions.append((f"{module.__name__}.{name}", value))
        built = self.build_objects(classes)
        for qualified, function in functions:
            self.call_all(qualified, function)
        for cls, objects in built.items():
            for name, member in inspect.getmembers(cls):
                function = getattr(member, "fget", member)
                if name.startswith("__") or not inspect.isfunction(function):
                    continue
                if isinstance(inspect.getattr_static(cls, name), (staticmethod, classmethod)):
                    self.call_all(f"{function.__module__}.{function.__qualname__}", function)
                    continue
                if function.__module__.split(".")[0] not in self.roots:
                    continue
                qualified = f"{function.__module__}.{function.__qualname__}"
                for obj in objects:
                    if isinstance(member, property):
                        self.check_call(qualified, function, [copy.deepcopy(obj)], {})
                    else:
                        self.call_all(qualified, function, prepared=obj)


if __name__ == "__main__":
    main()
