"""The form of a run-time schedule (the Run-time schedules page): the target chosen from the allowed ones, its
kwargs a JSON object checked against the target's signature, the spec and zone checked by mutexcron's own
parser, the run options (timeout, start deadline, busy policy, pause on failure) by ``mutex_cron``'s own checks,
and the errors of ``Scheduler.add_schedule`` put on the field they name."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from django import forms

from mutexcron.cron import parse_cron
from mutexcron.definitions import DEFAULT_LEASE, RUN_ON, RuntimeCall, ScheduleDefinition
from mutexcron.errors import CronSpecError, JobDefinitionError
from mutexcron.registry import (
    BUSY_POLICIES,
    CATCH_UP_POLICIES,
    MAX_NAME_LENGTH,
    failures_in_a_row,
    run_limit,
    validate_job_name,
)
from mutexcron.zones import zone_name

from .schedules import describe

# Which field a JobDefinitionError of add_schedule is about, by the first of these words its message holds
# (the schedule's name taken out first): kwargs before target, as "kwargs ... do not fit target ...".
ERROR_FIELDS = (("kwargs", "kwargs"), ("target", "target"), ("start_deadline", "start_deadline"),
                ("timeout", "timeout"), ("on_busy", "on_busy"), ("pause_on_failure", "pause_on_failure"),
                ("lease", "lease"), ("catch_up", "catch_up"), ("run_on", "run_on"), ("zone", "timezone"),
                ("cron", "spec"), ("spec", "spec"), ("name", "name"))
T = TypeVar("T")
RUN_ON_LABELS = {"here": "here: the instance that wins the lock runs it",
                 "tasks": "tasks: a task worker runs it (enqueued by the lock winner)"}
BUSY_LABELS = {"skip": "skip: the tick is skipped",
               "wait": "wait: the tick waits for the lock, up to a lease",
               "raise": "raise: the tick is skipped and logged as an error",
               "buffer_one": "buffer_one: the tick runs once the run ends (one such tick kept)",
               "replace": "replace: the running body is told to stop; the tick runs once it released"}


def target_label(name: str, func: Callable[..., Any]) -> str:
    """``name(its parameters)``, so that the operator sees what kwargs the target takes."""
    try:
        signature = inspect.signature(getattr(func, "func", func))
    except (TypeError, ValueError):
        return name
    shown = [_parameter(parameter) for parameter in signature.parameters.values() if parameter.name != "ctx"]
    return f"{name}({', '.join(shown)})"


def _parameter(parameter: inspect.Parameter) -> str:
    """``name: type = default`` (an annotation kept as a string, with ``from __future__ import annotations``,
    shown as written)."""
    kind = parameter.kind
    stars = "*" if kind is parameter.VAR_POSITIONAL else "**" if kind is parameter.VAR_KEYWORD else ""
    text = stars + parameter.name
    annotation = parameter.annotation
    if annotation is not parameter.empty:
        text += f": {annotation if isinstance(annotation, str) else getattr(annotation, '__name__', annotation)}"
    return text if parameter.default is parameter.empty else f"{text} = {parameter.default!r}"


def _no_constant(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


class RuntimeScheduleForm(forms.Form):
    """A run-time schedule's definition; ``targets`` are the allowed ones. Editing, the name is read-only."""

    name = forms.CharField(
        max_length=MAX_NAME_LENGTH, widget=forms.TextInput(attrs={"size": 40, "autocomplete": "off"}),
        help_text="The job's name: letters, digits and . _ - : @ / < > +; not the name of a job declared in code.")
    target = forms.ChoiceField(
        help_text="What it calls: only the functions the code allows (@callable_target) can be chosen.")
    spec = forms.CharField(
        max_length=255, label="Cron spec",
        widget=forms.TextInput(attrs={"size": 30, "autocomplete": "off", "spellcheck": "false"}),
        help_text="Five fields (minute hour day month weekday), or six with seconds first.")
    kwargs = forms.CharField(
        required=False, label="Arguments (JSON)", initial="{}",
        widget=forms.Textarea(attrs={"rows": 5, "cols": 60, "spellcheck": "false", "class": "vLargeTextField"}),
        help_text='The target\'s keyword arguments as a JSON object, such as {"to": "ops@example.com"}.')
    timezone = forms.CharField(
        required=False, max_length=64, label="Time zone",
        help_text="An IANA name such as Europe/Paris; empty: the scheduler's zone.")
    lease = forms.FloatField(
        min_value=1, initial=DEFAULT_LEASE.total_seconds(), label="Lease (seconds)",
        help_text="How long a run holds the lock between heartbeats before another instance may take it.")
    catch_up = forms.ChoiceField(
        choices=[(policy, policy) for policy in CATCH_UP_POLICIES], initial="skip", label="Catch up",
        help_text="What runs of the ticks missed while no instance ran: none, the latest, or all.")
    run_on = forms.ChoiceField(choices=[(where, RUN_ON_LABELS.get(where, where)) for where in RUN_ON],
                               initial="here", label="Runs on")
    timeout = forms.FloatField(
        required=False, label="Timeout (seconds)",
        help_text="A body still running this long is told to stop (ctx.cancelled) and recorded timed_out; empty: "
                  "no timeout.")
    start_deadline = forms.FloatField(
        required=False, label="Start deadline (seconds)",
        help_text="A tick whose body would start later than this after its time is recorded skipped_late instead; "
                  "empty: no deadline.")
    on_busy = forms.ChoiceField(choices=[(policy, BUSY_LABELS.get(policy, policy)) for policy in BUSY_POLICIES],
                                initial="skip", required=False, label="When busy",
                                help_text="What a tick does while an earlier run still holds the lock.")
    pause_on_failure = forms.IntegerField(
        required=False, label="Pause after failures",
        help_text="Pause it on every instance after this many failed runs in a row; empty: never.")

    def __init__(self, *args: Any, targets: dict[str, Callable[..., Any]], editing: bool = False,
                 scheduler_zone: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.targets = targets
        target = self.fields["target"]
        assert isinstance(target, forms.ChoiceField)
        target.choices = [("", "---------"), *((name, target_label(name, func)) for name, func in targets.items())]
        self.fields["name"].disabled = editing
        if scheduler_zone:
            self.fields["timezone"].help_text = f"An IANA name such as Europe/Paris; empty: the scheduler's zone " \
                                                f"({scheduler_zone})."

    @classmethod
    def initial_of(cls, name: str, definition: ScheduleDefinition) -> dict[str, Any]:
        """The form's fields for a stored definition."""
        stored = definition.as_dict()  # durations in seconds
        return {"name": name, "target": definition.target, "spec": definition.spec,
                "kwargs": json.dumps(definition.kwargs, indent=2, sort_keys=True),
                "timezone": definition.timezone or "", "lease": stored["lease"], "catch_up": definition.catch_up,
                "run_on": definition.run_on, "timeout": stored["timeout"], "start_deadline": stored["start_deadline"],
                "on_busy": definition.on_busy, "pause_on_failure": definition.pause_on_failure}

    def clean_name(self) -> str:
        try:
            return validate_job_name(self.cleaned_data["name"])
        except JobDefinitionError as error:
            raise forms.ValidationError(str(error)) from None

    def clean_spec(self) -> str:
        spec = str(self.cleaned_data["spec"]).strip()
        try:
            parse_cron(spec, job_name=self.data.get("name") or "schedule")
        except CronSpecError as error:
            raise forms.ValidationError(str(error)) from None
        return spec

    def clean_timezone(self) -> str | None:
        try:
            return zone_name(str(self.cleaned_data.get("timezone") or "").strip() or None, job_name="schedule")
        except CronSpecError as error:
            raise forms.ValidationError(str(error)) from None

    def clean_kwargs(self) -> dict[str, Any]:
        text = str(self.cleaned_data.get("kwargs") or "").strip() or "{}"
        try:
            value = json.loads(text, parse_constant=_no_constant)
        except ValueError as error:
            raise forms.ValidationError(f"Not JSON: {error}.") from None
        if not isinstance(value, dict):
            raise forms.ValidationError(f"Give a JSON object of keyword arguments ({{\"name\": value, ...}}), "
                                        f"not {type(value).__name__} {text[:80]}.")
        return value

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        name, target, kwargs = data.get("name"), data.get("target"), data.get("kwargs")
        if name and target in self.targets and isinstance(kwargs, dict):
            try:
                RuntimeCall(target, self.targets[target], kwargs).check(f"schedule {name!r}")
            except JobDefinitionError as error:
                self.add_error("kwargs", str(error))
        return data

    def clean_lease(self) -> timedelta:
        return timedelta(seconds=float(self.cleaned_data["lease"]))

    def clean_timeout(self) -> timedelta | None:
        return self._checked(lambda name: run_limit(self.cleaned_data.get("timeout"), name, "timeout"))

    def clean_start_deadline(self) -> timedelta | None:
        return self._checked(lambda name: run_limit(self.cleaned_data.get("start_deadline"), name, "start_deadline"))

    def clean_on_busy(self) -> str:
        """The policy chosen; "skip" if none was posted (a form of an older release)."""
        return str(self.cleaned_data.get("on_busy") or "skip")

    def clean_pause_on_failure(self) -> int | bool:
        """An int of at least 1, or False (never) for an empty field."""
        value = self.cleaned_data.get("pause_on_failure")
        self._checked(lambda name: failures_in_a_row(value, name))
        return False if value is None else int(value)

    def _checked(self, check: Callable[[str], T]) -> T:
        """``check(name)``: a rule of ``mutex_cron`` on a field, its JobDefinitionError the field's error."""
        try:
            return check(str(self.cleaned_data.get("name") or self.initial.get("name") or "schedule"))
        except JobDefinitionError as error:
            raise forms.ValidationError(str(error)) from None

    def definition_error(self, error: JobDefinitionError) -> None:
        """Put an error of ``Scheduler.add_schedule`` on the field it names (else on the form)."""
        message = str(error)
        name = self.cleaned_data.get("name") or ""
        about = message.replace(repr(name), "") if name else message
        field = next((field for word, field in ERROR_FIELDS if word in about), None)
        self.add_error(field, message)

    def spec_description(self) -> str:
        """The spec in the form (posted, else the initial one) in plain words; "" if it is no valid spec."""
        spec = self.data.get("spec") if self.is_bound else self.initial.get("spec")
        return describe(str(spec)) if spec and not self.has_error("spec") else ""
