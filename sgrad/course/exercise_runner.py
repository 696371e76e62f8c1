"""The student's side of a check: drive the class a student wrote on the inputs a checker chose, and record what came out.

A checker (:mod:`sgrad.course.checkers`) chooses the inputs, :func:`drive` runs the student's code on
them and records its outputs as plain data (arrays, numbers, names), and the checker's judge compares
that data with sgrad's reference.  In a notebook the three run in one process.  When ``sgrad grade``
grades a notebook, this file runs as a script in the grading sandbox (:func:`main`), where ``import
sgrad`` finds the homework edition; its record travels back to the grader as data (:func:`encode`,
:func:`decode`: arrays as .npy bytes, never pickles), where the judge runs: nothing in the sandbox decides
a verdict.  So that it runs there as it is, it imports nothing of sgrad.

A record is a dict: ``{"cases": [case, ...]}``, one case per set of inputs, each case a dict of
``name: value``, where a value is a float64 array, None, a string, a list of strings, a dict of arrays
(parameters), or ``{"kind": "a tuple of length 3"}`` for an answer that is not an array.  A stage that
raised ends its case with ``"error": {"stage", "type", "message", "where", "not_implemented"}``.
"""

import base64
import contextlib
import io
import os
import sys
import traceback

import numpy as np

# The largest record a kernel may send back, in bytes of its JSON: the checked arrays are a few hundred numbers.
RECORD_LIMIT = 2_000_000
# What the homework edition's withheld methods say (sgrad.course.edition): not the student's stub, but sgrad's own
# method, which the class ran instead of writing its own.
WITHHELD = "is withheld while sgrad grade runs"
ARRAY_LIMIT = 10_000  # entries of an answer sent back as an array; a larger one is sent as its shape alone
MESSAGE_LIMIT = 300  # characters of an exception's message that a record keeps


class _Stop(Exception):
    """Ends a case: a stage raised, and the record says so."""


def drive(exercise, make, inputs):
    """Run ``make`` (the student's class, or a factory) on ``inputs`` for ``exercise``; returns the record.

    A case whose checked object breaks a convention the exercise runner relies on (no ``parameters``, say) holds
    ``"broken": "AttributeError: ..."``.
    """
    cases = []
    for case in inputs["cases"]:
        try:
            cases.append(_DRIVERS[exercise](make, case))
        except Exception as error:
            cases.append({"broken": f"{type(error).__name__}: {str(error)[:MESSAGE_LIMIT]}"})
    return {"cases": cases}


READY = "sgrad exercise runner ready"  # the exercise runner's first line, written before any of the notebook's code runs


def main():
    """In the grading sandbox (``python -I exercise_runner.py``): read the job from stdin, load the notebook's definitions,
    drive the exercise's class, and write the record as one line of JSON to stdout.

    The job is ``{"library", "definitions", "exercise", "class_name", "inputs"}``: the folder of the homework
    edition, the notebook's definitions as ``[[cell number, source], ...]`` (:mod:`sgrad.course.definitions`),
    and the inputs as :func:`encode` gives them.  What the student's code prints goes nowhere: the record
    leaves through a copy of stdout taken before that code runs.
    """
    import json

    channel = os.fdopen(os.dup(1), "w")
    nowhere = os.open(os.devnull, os.O_WRONLY)
    os.dup2(nowhere, 1)
    os.dup2(nowhere, 2)
    channel.write(READY + "\n")
    channel.flush()
    job = json.loads(sys.stdin.read())
    sys.path.insert(0, job["library"])
    namespace, errors = load(job["definitions"])
    make = namespace.get(job["class_name"])
    if make is None:
        record = {"missing": True, "errors": errors}
    else:
        record = drive(job["exercise"], make, decode(job["inputs"]))
    channel.write(json.dumps(encode(record)) + "\n")
    channel.flush()
    os._exit(0)  # the record is the last line: no exit handler of the notebook's runs after it


def load(cells):
    """The namespace that the definitions ``cells`` (``[[cell number, source], ...]``) leave, run cell by cell
    as a kernel runs them (a cell that raises stops there; the next runs), and what each that raised said."""
    namespace = {"__name__": "__notebook__"}
    errors = []
    for number, source in cells:
        try:
            exec(compile(source, f"<code cell {number}>", "exec"), namespace)
        except Exception as error:
            errors.append(f"code cell {number} raised {type(error).__name__}: {str(error)[:MESSAGE_LIMIT]}")
    return namespace, errors


def _drive_backward(make, case):
    out = {}
    try:
        layer = _call(out, f"{_name(make)}({case['input_dim']}, {case['output_dim']}, {case['nonlin']!r}, "
                      f"seed={case['seed']})", make, case["input_dim"], case["output_dim"], case["nonlin"],
                      seed=case["seed"])
        out["class_name"] = type(layer).__name__
        out["defined_by"] = _defined_by(layer, "backward")
        out["parameters"] = _parameters(layer)
        _call(out, "forward()", layer.forward, case["x"].copy())
        watched = [] if out["defined_by"] == "sgrad" else [(cls, "backward", f"{cls.__name__}.backward()")
                                                           for cls in _sgrad_classes(layer, "backward")]
        with _watching(watched) as calls:
            out["input_delta"] = _value(_call(out, "backward()", layer.backward, case["R"].copy()))
        out["calls"] = list(calls)
        gradients = _call(out, "the gradients", lambda: dict(layer.gradients))
        out["gradients"] = {name: _value(gradients.get(name)) for name in out["parameters"]}
        out["weight_output_delta"] = _value(getattr(layer, "weight_output_delta", None))
        out["parameters_after"] = _parameters(layer)
    except _Stop:
        pass
    return out


def _drive_dni_update(make, case):
    out = {}
    try:
        layer = _build_dni(out, make, case)
        out["class_name"] = type(layer).__name__
        out["defined_by"] = _defined_by(layer, "forward_and_synthetic_update")
        out["parameters"] = _parameters(layer)
        watched = [] if out["defined_by"] == "sgrad" else [
            (layer, "backward", "self.backward()"), (layer, "update", "self.update()"),
            (getattr(layer, "update_rule", None), "step", "the parent class's update()")]
        with _watching(watched) as calls:
            returned = _call(out, "forward_and_synthetic_update()", layer.forward_and_synthetic_update,
                             case["x"].copy(), None if case["c"] is None else case["c"].copy())
        out["calls"] = list(calls)
        if isinstance(returned, tuple) and len(returned) == 2:
            out["returned"] = [_value(returned[0]), _value(returned[1])]
        else:
            out["returned"] = {"kind": _kind(returned)}
        out["synthetic_gradient"] = _value(getattr(layer, "synthetic_gradient", None))
        out["weights"] = _value(getattr(layer, "weights", None))
        out["bias"] = _value(getattr(layer, "bias", None))
    except _Stop:
        pass
    return out


def _drive_generator_update(make, case):
    out = {}
    try:
        layer = _build_dni(out, make, case)
        out["class_name"] = type(layer).__name__
        out["defined_by"] = _defined_by(layer, "update_synthetic_weights")
        out["parameters"] = _parameters(layer)
        c = None if case["c"] is None else case["c"].copy()
        sgrad_dni = _sgrad_dni(layer)
        if sgrad_dni is not None:  # the step's first half, as the stub of exercise 2 gives it, so that this check
            # grades the generator update alone: h = f(x W + b), then ĝ = M(h, c), which leaves [h, c] in M.input
            output = _call(out, "DNI.forward()", sgrad_dni.forward, layer, case["x"].copy())
            layer.synthetic_gradient = _call(out, "self.generator.forward()", layer.generator.forward, output, c)
        else:
            _call(out, "forward_and_synthetic_update()", layer.forward_and_synthetic_update, case["x"].copy(), c)
        generator = layer.generator
        watched = [] if out["defined_by"] == "sgrad" else [
            (generator, "update", "self.generator.update()"),
            (getattr(generator, "net", None), "update", "self.generator.net.update()")]
        with _watching(watched) as calls:
            out["loss"] = _value(_call(out, "update_synthetic_weights()", layer.update_synthetic_weights,
                                       case["target"].copy()))
        out["calls"] = list(calls)
        out["generator_after"] = {name: _value(value) for name, value in generator.parameters.items()}
    except _Stop:
        pass
    return out


_DRIVERS = {"backward": _drive_backward, "dni_update": _drive_dni_update, "generator_update": _drive_generator_update}


def _build_dni(out, make, case):
    return _call(out, f"{_name(make)}({case['input_dim']}, {case['output_dim']}, {case['nonlin']!r}, ...)", make,
                 case["input_dim"], case["output_dim"], case["nonlin"], alpha=case["alpha"],
                 condition_dim=case["condition_dim"], generator_alpha=case["generator_alpha"], generator_init="blog",
                 seed=case["seed"])


def _sgrad_dni(layer):
    """sgrad's DNI class, if ``layer`` is one (of a subclass)."""
    for cls in type(layer).__mro__:
        if cls.__name__ == "DNI" and cls.__module__.split(".")[0] == "sgrad":
            return cls
    return None


def _sgrad_classes(obj, method):
    """sgrad's classes among ``obj``'s bases that define ``method`` (sgrad's implementations of it)."""
    return [cls for cls in type(obj).__mro__ if method in vars(cls) and cls.__module__.split(".")[0] == "sgrad"]


def _defined_by(obj, method):
    """Whose ``method`` ``obj`` runs: "sgrad" (``obj`` is one of sgrad's own classes: the reference),
    "inherited" (a class written elsewhere that runs sgrad's), or "own"."""
    for cls in type(obj).__mro__:
        if method in vars(cls):
            if cls.__module__.split(".")[0] != "sgrad":
                return "own"
            return "sgrad" if type(obj).__module__.split(".")[0] == "sgrad" else "inherited"
    return "own"


@contextlib.contextmanager
def _watching(watched):
    """Log each call of the ``(owner, method name, label)`` triples while the block runs; yields the log.

    The calls still happen (the checked code runs as written).  An instance's wrapper is an attribute of
    the instance; a class's replaces the class's own method; both are removed when the block ends.
    """
    calls = []
    installed = []
    for owner, name, label in watched:
        method = getattr(owner, name, None)
        own = getattr(owner, "__dict__", None)
        if not callable(method) or own is None or (not isinstance(owner, type) and name in own):
            continue
        if isinstance(owner, type):
            method = own.get(name)
            if method is None:
                continue

        def logged(*args, _method=method, _label=label, **kwargs):
            calls.append(_label)
            return _method(*args, **kwargs)

        installed.append((owner, name, own.get(name) if isinstance(owner, type) else None))
        setattr(owner, name, logged)
    try:
        yield calls
    finally:
        for owner, name, original in installed:
            if isinstance(owner, type):
                setattr(owner, name, original)
            else:
                delattr(owner, name)


def _call(out, stage, function, *args, **kwargs):
    """Call the checked code; if it raises, record where and why in ``out`` and end the case."""
    try:
        return function(*args, **kwargs)
    except Exception as error:
        out["error"] = {"stage": stage, "type": type(error).__name__,
                        "message": str(error)[:MESSAGE_LIMIT], "where": _where(error),
                        "not_implemented": isinstance(error, NotImplementedError) and WITHHELD not in str(error)}
        raise _Stop from None


def _where(error):
    """' (in backward, line 7)': the deepest frame of the traceback outside sgrad and NumPy, if any."""
    # In the kernel this file runs as text; sgrad is what the notebook imported (its classes extend sgrad's).
    sgrad = sys.modules.get("sgrad")
    libraries = (os.path.dirname(np.__file__) + os.sep, "<sgrad",
                 *([os.path.dirname(str(sgrad.__file__)) + os.sep] if sgrad is not None else []))
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if not frame.filename.startswith(libraries)]
    return f" (in {frames[-1].name}, line {frames[-1].lineno})" if frames else ""


def _value(value):
    """A checked answer as data: a float64 array, None, or {"kind": ...} for what is not an array of numbers."""
    if value is None:
        return None
    try:
        array = np.array(value, dtype=np.float64, order="C")
    except (TypeError, ValueError, OverflowError):
        return {"kind": _kind(value)}
    return array if array.size <= ARRAY_LIMIT else {"kind": f"an array of shape {array.shape}, far larger than asked"}


def _parameters(layer):
    """The layer's parameters, its generator's (``generator.weights``, ...) among them."""
    parameters = {name: _value(value) for name, value in layer.parameters.items()}
    generator = getattr(layer, "generator", None)
    if generator is not None:
        parameters.update({f"generator.{name}": _value(value) for name, value in generator.parameters.items()})
    return parameters


def _kind(value):
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of length {len(value)}"
    return f"a value of type {type(value).__name__}"


def _name(function):
    return getattr(function, "__name__", type(function).__name__)


# --- the record as data -----------------------------------------------------------------------------------


def encode(record):
    """``record`` as JSON-ready data: each array as {"npy": base64 of its .npy bytes}."""
    if isinstance(record, np.ndarray):
        buffer = io.BytesIO()
        np.save(buffer, record, allow_pickle=False)
        return {"npy": base64.b64encode(buffer.getvalue()).decode("ascii")}
    if isinstance(record, dict):
        return {str(key): encode(value) for key, value in record.items()}
    if isinstance(record, (list, tuple)):
        return [encode(value) for value in record]
    return record


def decode(data):
    """The record that :func:`encode` gave; ValueError for anything else (the kernel's word is not trusted)."""
    if isinstance(data, dict):
        if set(data) == {"npy"}:
            return _array(data["npy"])
        return {_text(key): decode(value) for key, value in data.items()}
    if isinstance(data, list):
        return [decode(value) for value in data]
    if data is None or type(data) in (str, bool, int, float):
        return data
    raise ValueError(f"expected arrays, numbers and text; got {type(data).__name__}")


def _array(text):
    raw = base64.b64decode(_text(text), validate=True)
    array = np.load(io.BytesIO(raw), allow_pickle=False)
    if type(array) is not np.ndarray or array.dtype != np.float64:
        raise ValueError(f"expected a float64 array; got {array.dtype}")
    return array


def _text(value):
    if type(value) is not str:
        raise ValueError(f"expected text; got {type(value).__name__}")
    return value


if __name__ == "__main__":
    main()
