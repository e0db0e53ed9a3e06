"""The fold: records in, an :class:`~retryctl.report._model.Analysis` out, in one pass.

The cost a verdict's attempt added is charged to the attempt's ``target`` (the model or tool it ran
on), which gives cost by model and tool. A record that says whose ledger its budget is
(``budget.scope``: the step's own, or a ``run``'s that its steps share, as the middleware's and a tool
node's) says what its attempt charged to it (``budget.charged``), and that is the cost: a run's
totals are never added up, and a step met again (a second question on a thread) counts both visits.
In a log written before, ``budget.used`` is read as the step's own cumulative ledger: the cost is its
difference from the step's previous verdict. A step's outcome is its last verdict, completed by its
summary record when the run wrote one (``final_answer``, ``budget_max`` and, in ``extra.gold``, a gold
answer).

Two folds, one meaning. :func:`fold_dicts` is the reference: it reads plain dicts.
:func:`fold_records` reads the typed records of :mod:`retryctl.report._structs` and is the one the
audit runs; it computes exactly what the reference computes, record for record
(``tests/report/test_fast.py`` folds varied logs both ways and compares). Two things are deferred to
the end of a batch, in a way that keeps results identical: counters are fed from lists
(``Counter.update`` inserts keys in first-seen order, as ``+= 1`` per record does), and the cost a
verdict charges to its target is kept in per-target lists, in file order, then added to the totals
one after the other (:mod:`retryctl.report._charges`), so that the float sums are the same bits.
Keeping the charges as lists also lets a second process fold the second half of a log and hand its
charges over to be added after the first half's (:mod:`retryctl.report._audit`).

A line the typed decoder refused arrives in :func:`fold_records` as a dict and goes through the
reference fold, after everything pending has been applied, so that order is kept.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from itertools import repeat
from operator import mul
from typing import Any

from retryctl.report._charges import Pending, charge
from retryctl.report._model import (
    CONFIDENCE_BINS,
    MAX_TOKEN_ROWS,
    Analysis,
    StepOutcome,
    add_token_rows,
    attempt_label,
)
from retryctl.report._structs import UNSET, LeanRecord, Record

__all__ = ["fold_dicts", "fold_records"]

_INTERNED = 50_000


def fold_records(  # noqa: PLR0915 - the hot loop, inlined on purpose
    items: Iterable[Record | LeanRecord | dict[str, Any]],
    out: Analysis,
    pending: Pending,
    *,
    full: bool = True,
) -> None:
    """Fold records into ``out``; counters and charges go to ``pending`` (see :meth:`Pending.apply`).

    ``full=False`` (the records are :class:`LeanRecord`) folds only what the summary reads: no verdict
    flow, confidence histogram, token rows, step limits or step action lists.
    """
    steps = out.steps
    steps_get = steps.get
    runs_add = out.runs.add
    rows = out.token_rows
    # Counted at the end of the batch, while the strings are still in the cache.
    actions: list[str] = []
    transitions: list[tuple[str, str]] = []
    targets: list[Any] = []
    error_classes: list[Any] = []
    confidences: list[int | float] = []
    accepts: list[tuple[str, str, bool]] = []  # (step id, target, checked) of each accept verdict
    actions_append = actions.append
    trans_append = transitions.append
    targets_append = targets.append
    errors_append = error_classes.append
    conf_append = confidences.append
    p_samples, p_usd, p_in, p_out = pending.samples, pending.usd, pending.input_tokens, pending.output_tokens
    # Equal values the steps keep (actions, reasons, answers, costs) become one object: the steps'
    # fields are then few objects, which the summary reads many times over (twice as fast).
    strs = pending.strings.setdefault
    floats = pending.floats.setdefault
    # The step of the previous record: consecutive records of one step skip the lookup.
    step: Any = None
    step_run: Any = None
    step_id: Any = None
    n = verdicts = summaries = repairs = 0
    r: Any
    for r in items:
        n += 1
        if type(r) is dict:
            _count(out, (actions, transitions, targets, error_classes, confidences), pending)
            out.accepts.update(accepts)
            accepts.clear()
            pending.apply(out)
            pending.mixed = True
            fold_dicts([r], out)
            n -= 1  # fold_dicts counted it
            step = None
            continue
        kind = r.kind
        if kind == "verdict":
            verdicts += 1
            if r.step_id != step_id or r.run_id != step_run or step is None:
                step_run = r.run_id
                step_id = r.step_id
                step = steps_get((step_run, step_id))
                if step is None:
                    step = steps[(step_run, step_id)] = StepOutcome(step_run, step_id)
                    runs_add(step_run)
            action = strs(r.action, r.action)
            actions_append(action)
            if full:
                trans_append((step.last_action or "start", action))
                step.actions.append(action)
                confidence = r.confidence
                if confidence is not None:
                    conf_append(confidence)
            step.verdicts += 1
            step.last_action = action
            step.last_confidence = r.confidence
            step.last_reason = strs(r.reason, r.reason)
            attempt = r.attempt
            answer = r.answer
            if answer is not None and not step.has_summary:
                step.answer = strs(answer, answer) if type(answer) is str else answer
            thresholds = r.thresholds
            if thresholds is not None and thresholds.accept is not UNSET:
                accept = thresholds.accept
                step.threshold = floats(accept, accept) if type(accept) is float and accept > 0 else accept
            target = r.target or "(none)"
            if action == "accept":
                accepts.append((step_id, target, r.checked))
            budget = r.budget
            if budget is not None and budget.scope is not None:  # it says what its attempt charged
                charged = budget.charged
                if charged is not None:
                    k = int(charged.attempts)
                    if k > 0:
                        step.attempts = step.attempts + k
                        if k == 1:
                            targets_append(target)
                        else:
                            targets.extend(repeat(target, k))
                    charge(step, charged, target, (p_samples, p_usd, p_in, p_out))
            else:  # one verdict, one attempt
                if attempt > step.attempts:  # noqa: PLR1730 - max() is a call, this is a comparison
                    step.attempts = attempt
                targets_append(target)
            if budget is not None:
                used = None if budget.scope is not None else budget.used
                if used is not None:
                    samples = used.samples
                    d = samples - step.samples
                    if d > 0:
                        step.samples = floats(samples, samples) if type(samples) is float else samples
                        try:
                            p_samples[target].append(d)
                        except KeyError:
                            p_samples[target] = [d]
                    usd = used.usd
                    d = usd - step.usd
                    if d > 0:
                        step.usd = floats(usd, usd) if type(usd) is float else usd
                        try:
                            p_usd[target].append(d)
                        except KeyError:
                            p_usd[target] = [d]
                    tokens = used.input_tokens
                    d = tokens - step.input_tokens
                    if d > 0:
                        step.input_tokens = tokens
                        try:
                            p_in[target].append(d)
                        except KeyError:
                            p_in[target] = [d]
                    tokens = used.output_tokens
                    d = tokens - step.output_tokens
                    if d > 0:
                        step.output_tokens = tokens
                        try:
                            p_out[target].append(d)
                        except KeyError:
                            p_out[target] = [d]
                if full:
                    limit = budget.limit
                    if limit:
                        step.limits = limit
            error_class = r.error_class
            if error_class is not None:
                errors_append(error_class)
            candidates = r.candidates_summary
            if candidates is not None and candidates.tool is not UNSET:
                out.tools.add(target)
            extra = r.extra
            if not full:
                if extra is not None and extra.gold is not UNSET:
                    step.gold = str(extra.gold)
            elif extra is not None and (
                extra.gold is not UNSET
                or extra.token_entropy is not UNSET
                or extra.token_logprobs is not UNSET
                or extra.token_samples is not UNSET
            ):
                holder = extra.as_dict()
                if "gold" in holder:
                    step.gold = str(holder["gold"])
                if len(rows) < MAX_TOKEN_ROWS:
                    group = f"{step_run}/{step_id}"
                    add_token_rows(out, attempt_label(attempt, target), holder, group)
        elif kind == "summary":
            summaries += 1
            if r.step_id != step_id or r.run_id != step_run or step is None:
                step_run = r.run_id
                step_id = r.step_id
                step = steps_get((step_run, step_id))
                if step is None:
                    step = steps[(step_run, step_id)] = StepOutcome(step_run, step_id)
                    runs_add(step_run)
            step.has_summary = True
            answer = r.final_answer
            step.answer = strs(answer, answer) if type(answer) is str else answer
            used = r.budget_used
            if used is None:
                step.samples = max(step.samples, 0.0)
                step.usd = max(step.usd, 0.0)
            else:
                samples = float(used.samples)
                if samples > step.samples:
                    step.samples = floats(samples, samples)
                usd = float(used.usd)
                if usd > step.usd:
                    step.usd = floats(usd, usd)
            extra = r.extra
            if not full:
                if extra is not None and extra.gold is not UNSET:
                    gold = str(extra.gold)
                    step.gold = strs(gold, gold)
                continue
            limit = r.budget_max
            if limit:
                step.limits = limit
            if extra is not None:
                if extra.gold is not UNSET:
                    gold = str(extra.gold)
                    step.gold = strs(gold, gold)
                if (extra.token_entropy is not UNSET or extra.token_logprobs is not UNSET) and len(
                    rows
                ) < MAX_TOKEN_ROWS:
                    add_token_rows(out, "summary", extra.as_dict(), f"{step_run}/{step_id}")
            history = r.sampling_history
            if history and len(rows) < MAX_TOKEN_ROWS:
                for i, item in enumerate(history):
                    if isinstance(item, dict):
                        add_token_rows(out, f"sample {i + 1}", item, f"{step_run}/{step_id}")
        elif kind == "repair":
            repairs += 1
    _count(out, (actions, transitions, targets, error_classes, confidences), pending)
    out.accepts.update(accepts)
    out.records += n
    out.verdict_records += verdicts
    out.summary_records += summaries
    out.repair_records += repairs


def _count(
    out: Analysis, columns: tuple[list[Any], list[Any], list[Any], list[Any], list[Any]], pending: Pending
) -> None:
    """Add a batch's columns (actions, transitions, targets, error classes, confidences) to ``out``'s
    counters, in order: keys keep their first-seen order."""
    if len(pending.strings) > _INTERNED or len(pending.floats) > _INTERNED:  # mostly distinct values
        pending.strings.clear()
        pending.floats.clear()
    actions, transitions, targets, error_classes, confidences = columns
    out.actions.update(actions)
    out.transitions.update(transitions)
    out.target_attempts.update(targets)
    out.error_classes.update(error_classes)
    hist, last = out.confidence_hist, CONFIDENCE_BINS - 1
    for b, k in Counter(map(int, map(mul, confidences, repeat(CONFIDENCE_BINS)))).items():
        hist[b if b < last else last] += k
    for column in columns:
        column.clear()


def fold_dicts(records: Iterable[dict[str, Any]], out: Analysis) -> None:  # noqa: PLR0915 - one hot loop, inlined on purpose
    """The reference fold: each record a plain dict, read with ``.get`` as the schema allows."""
    steps = out.steps
    runs = out.runs
    actions = out.actions
    transitions = out.transitions
    hist = out.confidence_hist
    t_samples, t_usd, t_attempts = out.target_samples, out.target_usd, out.target_attempts
    t_in, t_out = out.target_input_tokens, out.target_output_tokens
    last_bin = CONFIDENCE_BINS - 1
    n = verdicts = summaries = repairs = 0
    for rec in records:
        n += 1
        get = rec.get
        kind = get("kind")
        if kind == "verdict":
            verdicts += 1
            run_id = get("run_id", "")
            key = (run_id, get("step_id", ""))
            step = steps.get(key)
            if step is None:
                step = steps[key] = StepOutcome(*key)
                runs.add(run_id)
            action = get("action", "?")
            actions[action] += 1
            transitions[(step.last_action or "start", action)] += 1
            step.actions.append(action)
            step.verdicts += 1
            step.last_action = action
            confidence = get("confidence")
            step.last_confidence = confidence
            if confidence is not None:
                b = int(confidence * CONFIDENCE_BINS)
                hist[b if b < last_bin else last_bin] += 1
            step.last_reason = get("reason", "")
            attempt = get("attempt", 0)
            answer = get("answer")
            if answer is not None and not step.has_summary:
                step.answer = answer
            thresholds = get("thresholds")
            if thresholds:
                step.threshold = thresholds.get("accept", step.threshold)
            budget = get("budget") or {}
            step.limits = budget.get("limit") or step.limits
            extra = get("extra") or {}
            target = get("target") or "(none)"
            if budget.get("scope") is not None:
                # The record says what its attempt charged (a run's shared ledger holds every
                # step's spend, and a step's own ledger starts again when the step is met again).
                charged = budget.get("charged") or {}
                d_samples = charged.get("samples", 0.0)
                d_usd = charged.get("usd", 0.0)
                d_in = charged.get("input_tokens", 0.0)
                d_out = charged.get("output_tokens", 0.0)
                # Attempts made, not verdicts: a model the breaker skipped charged none.
                k = int(charged.get("attempts", 0.0))
                if k > 0:
                    step.attempts = step.attempts + k
                    t_attempts[target] += k
                if d_samples > 0:
                    step.samples = step.samples + d_samples
                    t_samples[target] += d_samples
                if d_usd > 0:
                    step.usd = step.usd + d_usd
                    t_usd[target] += d_usd
                if d_in > 0:
                    t_in[target] += d_in
                if d_out > 0:
                    t_out[target] += d_out
            else:
                # A log written before records said: the step's own ledger, its totals cumulative,
                # each verdict's increase what its attempt spent.
                used = budget.get("used") or {}
                samples = used.get("samples", 0.0)
                usd = used.get("usd", 0.0)
                d_samples = samples - step.samples
                d_usd = usd - step.usd
                if d_samples > 0:
                    t_samples[target] += d_samples
                    step.samples = samples
                if d_usd > 0:
                    t_usd[target] += d_usd
                    step.usd = usd
                tokens = used.get("input_tokens", 0.0)
                d_in = tokens - step.input_tokens
                if d_in > 0:
                    t_in[target] += d_in
                    step.input_tokens = tokens
                tokens = used.get("output_tokens", 0.0)
                d_out = tokens - step.output_tokens
                if d_out > 0:
                    t_out[target] += d_out
                    step.output_tokens = tokens
                step.attempts = max(step.attempts, attempt)
                t_attempts[target] += 1
            if action == "accept":
                out.accepts[(key[1], target, get("checked", True))] += 1
            error_class = get("error_class")
            if error_class is not None:
                out.error_classes[error_class] += 1
            summary = get("candidates_summary")
            if isinstance(summary, dict) and "tool" in summary:
                out.tools.add(target)
            if extra:
                if "gold" in extra:
                    step.gold = str(extra["gold"])
                add_token_rows(out, attempt_label(attempt, target), extra, f"{key[0]}/{key[1]}")
        elif kind == "summary":
            summaries += 1
            _fold_summary_dict(out, rec)
        elif kind == "repair":
            repairs += 1
    out.records += n
    out.verdict_records += verdicts
    out.summary_records += summaries
    out.repair_records += repairs


def _fold_summary_dict(out: Analysis, rec: dict[str, Any]) -> None:
    run_id = rec.get("run_id", "")
    key = (run_id, rec.get("step_id", ""))
    step = out.steps.get(key)
    if step is None:
        step = out.steps[key] = StepOutcome(*key)
        out.runs.add(run_id)
    step.has_summary = True
    step.answer = rec.get("final_answer")
    used = rec.get("budget_used") or {}
    step.samples = max(step.samples, float(used.get("samples", 0.0)))
    step.usd = max(step.usd, float(used.get("usd", 0.0)))
    step.limits = rec.get("budget_max") or step.limits
    extra = rec.get("extra") or {}
    if "gold" in extra:
        step.gold = str(extra["gold"])
    add_token_rows(out, "summary", extra, f"{key[0]}/{key[1]}")
    for i, item in enumerate(rec.get("sampling_history") or []):
        if isinstance(item, dict):
            add_token_rows(out, f"sample {i + 1}", item, f"{key[0]}/{key[1]}")
