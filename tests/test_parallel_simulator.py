"""The schedule simulator: the operations it runs are the schedules' own, on cases whose steady-state time per batch
can be worked out by hand."""

import pytest

from sgrad.parallel.simulator import BlockTimes, programs, scaling, simulate, speed, throughput

BATCH = 256


def seconds_per_batch(schedule, blocks, top, workers, transfer=0.0, steps=None):
    return BATCH / throughput(schedule, blocks, top, workers, transfer=transfer, batch=BATCH, steps=steps)


def test_a_simulated_worker_makes_the_operations_of_the_schedules_own_step():
    """DNI on 2 workers, blocks 0 and 1 on worker 0, block 2 and the top on worker 1: sgrad.parallel.schedules'
    Decoupled.step, run on costed blocks (consecutive computations add up into one)."""
    blocks = [BlockTimes(1.0, 2.0, 0.5, 3.0, 4.0), BlockTimes(10.0, 20.0, 5.0, 30.0, 40.0),
              BlockTimes(100.0, 200.0, 50.0, 300.0, 400.0)]
    synthetic_update = [b.generator + b.backward + b.update for b in blocks]  # ĝ, its backward pass, the step
    low, high = programs("dni", blocks, 0.25, 2, steps=2)
    assert list(low) == [
        ("compute", 1.0 + 10.0), ("send", ("activation", 1, 1)),  # the stage forward, h up at once
        ("compute", synthetic_update[0] + synthetic_update[1] + 4.0), ("done", 1),  # then M_0 onto δ_0 at once
        ("compute", 11.0), ("send", ("activation", 1, 2)), ("compute", synthetic_update[0]),
        ("receive", ("target", 0, 1)),  # M_1 waits for batch 1's target from above before it predicts batch 2
        ("compute", 40.0 + synthetic_update[1] + 4.0), ("done", 2)]
    assert list(high)[:5] == [
        ("receive", ("activation", 1, 1)), ("compute", 100.0 + 0.25 + synthetic_update[2]),
        ("send", ("target", 0, 1)), ("compute", 400.0), ("done", 1)]  # M_2 regresses after δ_1 has gone down


def test_under_the_complete_unlock_a_simulated_worker_makes_the_operations_of_the_schedules_own_step():
    """The complete unlock on 2 workers, blocks 0 and 1 on worker 0, block 2 and the top on worker 1: the input
    generator of layer i costs block i - 1's synthetic_input and input_regression."""
    blocks = [BlockTimes(1.0, 2.0, 0.5, 3.0, 4.0, 5.0, 6.0), BlockTimes(10.0, 20.0, 5.0, 30.0, 40.0, 50.0, 60.0),
              BlockTimes(100.0, 200.0, 50.0, 300.0, 400.0, 500.0, 600.0)]
    synthetic_update = [b.generator + b.backward + b.update for b in blocks]
    regression_at_the_synthetic_input = [b.regression + b.generator for b in blocks]  # line 5 predicts once more
    low, high = programs("complete", blocks, 0.25, 2, steps=2)
    assert list(low) == [
        ("compute", 5.0 + 1.0 + 10.0), ("send", ("activation", 1, 1)),  # ĥ_1, both blocks forward, h_2 up at once
        ("compute", synthetic_update[0] + synthetic_update[1] + regression_at_the_synthetic_input[0] + 6.0),
        ("done", 1),
        ("compute", 16.0), ("send", ("activation", 1, 2)), ("compute", synthetic_update[0]),
        ("receive", ("target", 0, 1)), ("receive", ("synthetic input", 0, 1)),  # M_2's target and where it predicts
        ("compute", regression_at_the_synthetic_input[1] + synthetic_update[1] + regression_at_the_synthetic_input[0]
         + 6.0), ("done", 2)]
    assert list(high) == [  # forward unlocked: batch 1 starts at once, on ĥ_2 and ĥ_3
        ("compute", 50.0 + 500.0 + 100.0 + 0.25 + synthetic_update[2]),
        ("send", ("synthetic input", 0, 1)), ("send", ("target", 0, 1)),
        ("compute", regression_at_the_synthetic_input[2] + 600.0), ("done", 1),
        ("receive", ("activation", 1, 1)),  # I_2 regresses onto batch 1's h_2 before it predicts batch 2's ĥ_2
        ("compute", 60.0 + 50.0 + 500.0 + 100.0 + 0.25 + synthetic_update[2]),
        ("send", ("synthetic input", 0, 2)), ("send", ("target", 0, 2)),
        ("compute", regression_at_the_synthetic_input[2] + 600.0), ("done", 2)]


@pytest.mark.parametrize("schedule", ["backprop", "pipelined-backprop", "dni", "complete"])
def test_one_worker_takes_the_sum_of_every_operation(schedule):
    blocks = [BlockTimes(1.0, 2.0, 0.5, 3.0, 4.0, 0.7, 0.9), BlockTimes(0.5, 1.0, 0.25, 1.5, 2.0, 0.6, 0.8)]
    own = sum(b.forward + b.backward + b.update for b in blocks)
    generators = sum(b.generator + b.regression for b in blocks) if schedule in ("dni", "complete") else 0.0
    # The complete unlock: each gradient generator predicts once more, at ĥ; an input generator per block.
    inputs = sum(b.generator + b.synthetic_input + b.input_regression for b in blocks) if schedule == "complete" else 0
    assert seconds_per_batch(schedule, blocks, 0.7, 1) == pytest.approx(own + generators + inputs + 0.7)


def test_locked_backprop_on_two_workers_waits_for_everything_but_the_top_workers_last_step():
    # w0: f0, send (τ), [w1: f1, top, b1, send (τ)], b0, u0; w1's u1 runs while w0 finishes.
    low, high = BlockTimes(1.0, 2.0, 0.5), BlockTimes(0.75, 1.5, 0.25)
    expected = 1.0 + 0.75 + 0.3 + 1.5 + 2.0 + 0.5 + 2 * 0.1
    assert seconds_per_batch("backprop", [low, high], 0.3, 2, transfer=0.1) == pytest.approx(expected)


def test_dni_on_k_balanced_workers_is_k_times_faster_when_messages_are_free():
    blocks = [BlockTimes(1.0, 2.0, 0.5, 3.0, 4.0)] * 4
    one = seconds_per_batch("dni", blocks, 0.0, 1)
    for workers in (2, 4):
        assert seconds_per_batch("dni", blocks, 0.0, workers) == pytest.approx(one / workers)


def test_dni_with_slow_messages_shares_each_round_trip_between_two_batches_in_flight():
    # Worker 0 forwards batch t+1 and sends it up before it waits for batch t's target, which needs h_t to go up (τ),
    # worker 1's block forward, top, and synthetic update (prediction, backward pass and step) (c1), and δ_t to come
    # down (τ); worker 1's generator regresses onto the top's target after δ_t has gone.  Then worker 0 finishes its
    # step (the rest of w0: its generator's regression, then its synthetic update).  That cycle covers two batches.
    low, high = BlockTimes(1.0, 2.0, 0.5, 3.0, 4.0), BlockTimes(0.5, 1.0, 0.25, 1.5, 2.0)
    w0 = 1.0 + 4.0 + 3.0 + 2.0 + 0.5
    c1 = 0.5 + 0.3 + 1.5 + 1.0 + 0.25
    expected = (w0 + c1 + 2 * 100.0) / 2
    assert seconds_per_batch("dni", [low, high], 0.3, 2, transfer=100.0) == pytest.approx(expected)


def test_the_complete_unlock_with_slow_messages_shares_each_round_trip_between_three_batches_in_flight():
    # Worker 0 (block 0) forwards batch t and sends h_t up (τ); worker 1 (block 1 and the top) has run batch t
    # already and waits for h_t only before batch t+1, whose δ it sends down after its input generators' step, ĥ,
    # its block's forward pass, the top and its block's synthetic update (c1); that δ comes down (τ) to worker 0's
    # step t+2, which then regresses and updates its block (w0).  That cycle covers three batches.
    low, high = BlockTimes(1.0, 2.0, 0.5, 3.0, 4.0, 0.7, 0.9), BlockTimes(0.5, 1.0, 0.25, 1.5, 2.0, 0.6, 0.8)
    c1 = 0.9 + 0.7 + 0.6 + 0.5 + 0.3 + 1.5 + 1.0 + 0.25
    w0 = 4.0 + 3.0 + 3.0 + 2.0 + 0.5
    expected = (1.0 + 100.0 + c1 + 100.0 + w0) / 3
    # 300 measured steps: a whole number of three-step cycles.
    assert seconds_per_batch("complete", [low, high], 0.3, 2, transfer=100.0, steps=600) == pytest.approx(expected)
    assert expected < seconds_per_batch("dni", [low, high], 0.3, 2, transfer=100.0)


def test_pipelined_backprop_is_paced_by_the_worker_that_runs_its_forward_pass_twice():
    blocks = [BlockTimes(1.0, 2.0, 0.5)] * 3
    # Below the top: f (batch t) + f again + b + u (batch t - d); the top: f + top + b + u.
    assert seconds_per_batch("pipelined-backprop", blocks, 0.2, 3) == pytest.approx(1.0 + 1.0 + 2.0 + 0.5)
    assert seconds_per_batch("pipelined-backprop", blocks, 2.0, 3) == pytest.approx(1.0 + 2.0 + 2.0 + 0.5)


def test_scaling_gives_the_throughput_of_a_deep_net_on_each_worker_count():
    block = BlockTimes(1e-3, 2e-3, 5e-4, 3e-3, 4e-3)
    rates = scaling("dni", block, 0.0, blocks=64)
    assert list(rates) == [1, 2, 4, 8, 16, 32, 64]
    for workers, rate in rates.items():
        assert rate == pytest.approx(workers * rates[1])


def test_locked_backprop_gains_nothing_from_more_workers_but_the_overlapped_steps():
    block = BlockTimes(1e-3, 2e-3, 0.0)
    rates = scaling("backprop", block, 0.0, blocks=8, workers=(1, 2, 8))
    assert rates[2] == pytest.approx(rates[1]) and rates[8] == pytest.approx(rates[1])


def program(*operations):
    return iter(operations)


def test_a_worker_that_sleeps_in_a_receive_resumes_wake_seconds_after_its_message_arrives():
    sender = program(("compute", 1.0), ("send", "a"))
    late = program(("compute", 0.5), ("receive", "a"), ("compute", 1.0), ("done", 1))
    _, finished = simulate([sender, late], 0.5, wake=0.25)
    assert finished[1] == pytest.approx(1.0 + 0.5 + 0.25 + 1.0)


def test_a_worker_whose_message_is_already_there_pays_no_wake():
    sender = program(("compute", 1.0), ("send", "a"))
    busy = program(("compute", 2.0), ("receive", "a"), ("compute", 1.0), ("done", 1))
    _, finished = simulate([sender, busy], 0.5, wake=0.25)
    assert finished[1] == pytest.approx(3.0)


def test_locked_backprop_on_two_workers_pays_a_wake_for_each_of_its_two_messages():
    low, high = BlockTimes(1.0, 2.0, 0.5), BlockTimes(0.75, 1.5, 0.25)
    without = seconds_per_batch("backprop", [low, high], 0.3, 2, transfer=0.1)
    assert BATCH / throughput("backprop", [low, high], 0.3, 2, transfer=0.1, wake=0.05, batch=BATCH) == \
        pytest.approx(without + 2 * 0.05)


def test_two_workers_computing_at_once_each_run_slower_by_the_contention():
    # Both run at 1/1.1 until the first has done its 1 s of work (at 1.1 s); the second then runs alone.
    finished = simulate([program(("compute", 1.0), ("done", 1)), program(("compute", 2.0), ("done", 1))], 0.0,
                        contention=0.1)
    assert finished[0][1] == pytest.approx(1.1) and finished[1][1] == pytest.approx(2.1)


def test_more_busy_workers_than_cores_take_turns():
    for contention, expected in ((0.0, 2.0), (0.1, 2.2)):
        finished = simulate([program(("compute", 1.0), ("done", 1)) for _ in range(4)], 0.0, contention=contention,
                            cores=2)
        assert [f[1] for f in finished] == pytest.approx([expected] * 4)


def test_dni_on_two_busy_workers_is_slowed_by_the_contention():
    # In the steady state both workers compute nearly all the time; the window of 100 steps it is measured over
    # starts and ends at slightly different phases of the two workers, hence the tolerance.
    blocks = [BlockTimes(1.0, 2.0, 0.5, 3.0, 4.0)] * 4
    one = seconds_per_batch("dni", blocks, 0.0, 1)
    slowed = BATCH / throughput("dni", blocks, 0.0, 2, contention=0.1, batch=BATCH)
    assert slowed == pytest.approx(one / 2 * 1.1, rel=1e-3)


def test_a_worker_computing_alone_is_not_slowed_by_contention():
    blocks = [BlockTimes(1.0, 2.0, 0.5, 3.0, 4.0)] * 2
    alone = BATCH / throughput("dni", blocks, 0.5, 1, contention=0.5, cores=2, batch=BATCH)
    assert alone == pytest.approx(seconds_per_batch("dni", blocks, 0.5, 1))


def test_dni_on_more_workers_than_cores_gains_only_what_the_cores_give():
    blocks = [BlockTimes(1.0, 2.0, 0.5, 3.0, 4.0)] * 4
    one = seconds_per_batch("dni", blocks, 0.0, 1)
    assert BATCH / throughput("dni", blocks, 0.0, 4, cores=2, batch=BATCH) == pytest.approx(one / 2, rel=1e-2)
    assert BATCH / throughput("dni", blocks, 0.0, 4, cores=1, batch=BATCH) == pytest.approx(one, rel=1e-2)


def test_a_message_in_flight_takes_its_processor_time_from_the_cores():
    # 1 s in flight, 0.5 s of processor time: half a core busy.  On one core the worker computing beside it gets
    # 1 / 1.5 of the core while it flies (2/3 s of work by t = 1), then all of it.
    for cores, expected in ((1, 1.0 + 1.0 / 3.0), (2, 1.0)):
        sender = program(("send", "a"), ("compute", 1.0), ("done", 1))
        finished = simulate([sender, program(("receive", "a"))], 1.0, cores=cores, message_cpu=0.5)
        assert finished[0][1] == pytest.approx(expected)


@pytest.mark.parametrize(("busy", "contention", "cores", "expected"), [
    (1, 0.2, 2, 1.0), (2, 0.2, 2, 1 / 1.2), (4, 0.2, 2, 0.5 / 1.2), (3, 0.0, None, 1.0), (3, 0.1, None, 1 / 1.2)])
def test_speed_of_each_busy_worker(busy, contention, cores, expected):
    assert speed(busy, contention, cores) == pytest.approx(expected)


def test_speed_counts_the_cores_that_messages_keep_busy():
    assert speed(2, 0.0, 2, load=0.5) == pytest.approx(2 / 2.5)
    assert speed(1, 0.0, 2, load=0.5) == pytest.approx(1.0)  # a core to spare
    assert speed(2, 0.0, None, load=0.5) == pytest.approx(1.0)  # a core per worker: messages take none


def test_scaling_passes_the_machine_on():
    block = BlockTimes(1e-3, 2e-3, 5e-4, 3e-3, 4e-3)
    ideal = scaling("dni", block, 0.0, blocks=8, workers=(2, 8))
    shared = scaling("dni", block, 0.0, blocks=8, workers=(2, 8), cores=2)
    assert shared[2] == pytest.approx(ideal[2]) and shared[8] == pytest.approx(ideal[2], rel=1e-2)
    assert ideal[8] == pytest.approx(4 * ideal[2])


GOOD = [BlockTimes(1.0, 1.0, 0.5, 0.2, 0.2)] * 2


@pytest.mark.parametrize("call, error, message", [
    (lambda: throughput("dni", [BlockTimes(float("nan"), 1.0, 0.5)] * 2, 0.1, 2), ValueError,
     r"blocks\[0\].forward \(seconds\) must be a finite number >= 0, e.g. 0.002; got nan"),
    (lambda: throughput("dni", [BlockTimes(1.0, -1.0, 0.5)] * 2, 0.1, 2), ValueError,
     r"blocks\[0\].backward \(seconds\) must be a finite number >= 0"),
    (lambda: throughput("dni", GOOD, -0.1, 2), ValueError, r"top \(seconds\) must be a finite number >= 0"),
    (lambda: throughput("dni", GOOD, 0.1, 2, contention=-1.0), ValueError,
     "contention must be a finite number >= 0, e.g. 0.1; got -1.0"),
    (lambda: throughput("dni", GOOD, 0.1, 0), ValueError, "workers must be at least 1; got 0"),
    (lambda: throughput("dni", GOOD, 0.1, 3), ValueError, "workers must be at most the 2 blocks"),
    (lambda: throughput("sgd", GOOD, 0.1, 2), ValueError, "unknown schedule 'sgd'; choose one of 'backprop', "),
    (lambda: throughput("dni", GOOD, 0.1, 2, steps=1), ValueError, "steps must be at least 2; got 1"),
    (lambda: throughput("dni", GOOD, 0.1, 2, steps=0), ValueError, "steps must be at least 2; got 0"),
    (lambda: throughput("dni", GOOD, 0.1, 2, cores=0), ValueError, "cores must be at least 1; got 0"),
    (lambda: throughput("dni", GOOD, 0.1, 2, transfer=float("inf")), ValueError, r"transfer \(seconds\) must be a"),
    (lambda: throughput("dni", [BlockTimes(0.0, 0.0, 0.0)] * 2, 0.0, 1), ValueError, "take no time at all"),
    (lambda: throughput("dni", [(1.0, 1.0, 0.5)], 0.1, 1), TypeError, r"blocks\[0\] must be a BlockTimes"),
    (lambda: scaling("dni", GOOD[0], 0.1, blocks=8, workers=(0, 2)), ValueError, "workers must be at least 1"),
    (lambda: scaling("dni", GOOD[0], 0.1, blocks=8, workers=()), TypeError, "workers must be a non-empty sequence"),
], ids=["nan-time", "negative-time", "negative-top", "negative-contention", "no-workers", "more-workers-than-blocks",
        "unknown-schedule", "one-step", "no-steps", "no-cores", "infinite-transfer", "no-time", "a-tuple",
        "scaling-no-workers", "scaling-empty"])
def test_bad_inputs_are_refused_with_what_came(call, error, message):
    with pytest.raises(error, match=message):
        call()
