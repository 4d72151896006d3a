"""``mode="workflow"`` of ``Conductor-v0``: an action is the conductor's plan, run whole; the planning
rounds of recursion, the plan's final-answer choice and the conductor's own cost."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from puppeteer.envs.aggregate import PLAN_CHOICES, cascade_trigger, choice_label, final_answer
from puppeteer.envs.conductor_prompt import ConductorPrompt, Followup, Price, build_prompt
from puppeteer.envs.reward import COST_UNITS, conductor_cost, conductor_reward
from puppeteer.envs.workflow import (
    PlanSpace,
    WorkflowError,
    WorkflowLimits,
    extract_lists,
    format_workflow,
    parse_workflow,
)
from puppeteer.tasks.signals import fires
from puppeteer.types import ConductorAction, Step, Workflow
from puppeteer.utils.textsafe import encodable

FOLLOWUP_ANSWER_CHARS = 800


class WorkflowMode:
    """The workflow-mode actions of :class:`~puppeteer.envs.env.ConductorEnv`, which holds the episode's
    state."""

    @property
    def self_id(self) -> int | None:
        """The conductor's own worker id while it may still recurse (``len(pool)``), else None (also
        under ``recursion="always"``, where the next round comes without being asked for)."""
        c = self.config
        if c.mode == "workflow" and c.recursion == "offer" and self._depth < c.max_depth:
            return len(self.pool)
        return None

    def plan_space(self) -> PlanSpace:
        """What a valid plan of the current planning round may contain (:func:`_parse` accepts it)."""
        return PlanSpace(
            available=tuple(int(i) for i in np.flatnonzero(self.available())),
            max_steps=self.config.max_steps,
            self_id=self.self_id,
            allow_empty=self._depth > 0,
            final=self.config.final_answer in PLAN_CHOICES,
            cascade=self.config.final_answer == "cascade",
        )

    def prompt(self) -> ConductorPrompt:
        """The conductor prompt of the current planning round (chat messages; ``.text`` is obs["prompt"])."""
        return build_prompt(
            self.pool,
            self.task.question,
            self.task.domain,
            self.config.max_steps,
            available=self.available(),
            self_id=self.self_id,
            followup=self._followup,
            config=self._prompt_config,
            final=self.config.final_answer,
            price=(
                Price(self._lam, COST_UNITS[self.config.cost_model], self.config.cost_model)
                if self.config.states_price
                else None
            ),
        )

    def _conductor_tokens(self) -> int | None:
        """The conductor's tokens this episode (None: no generation came with its actions)."""
        if not self._conductor:
            return None
        return sum(c.total_tokens for c, _ in self._conductor)

    def _conductor_cost(self) -> float:
        """F of the conductor's own generations this episode (0 without any)."""
        name = self.config.cost_model
        return sum(conductor_cost(name, c, model) for c, model in self._conductor)

    def _answer_so_far(self) -> str | None:
        """What grading would take if the episode ended now (the aggregate, not the last step's answer:
        a last step that extracted nothing leaves the earlier answer standing)."""
        return self._workflow_final()[0]

    def _workflow_final(self) -> tuple[str | None, str]:
        """The final answer under the latest round's choice, and that choice as recorded: the plan's
        named step (counted from its round's first step), ``vote`` or ``last`` over all steps."""
        choice, offset = self._final
        answers = [s.answer for s in self._steps]
        if isinstance(choice, int):
            return final_answer(answers, offset + choice), choice_label(choice)
        return final_answer(answers, choice), choice

    def _round(self, text: str | None, **fields: Any) -> dict[str, Any]:
        record = {
            "depth": self._depth,
            "text": text,
            "parse_error": None,
            "workflow": None,
            "steps": [],
            "answer": None,
            "recurse": False,
            **fields,
        }
        self._rounds.append(record)
        return record

    def _parse(self, text: str | None) -> Workflow | None:
        """The round's workflow; None for the empty-lists "keep the answer" end of an inner round."""
        if text is None:
            raise WorkflowError("a workflow action is text")
        if self._depth > 0:
            try:
                if extract_lists(text) == ([], [], []):
                    return None
            except WorkflowError:
                pass
        self_id = self.self_id
        available = self.available().tolist() + ([True] if self_id is not None else [])
        workflow = parse_workflow(
            text,
            len(available),
            available,
            WorkflowLimits(max_steps=self.config.max_steps),
            final=self.config.final_answer in PLAN_CHOICES,
            cascade=self.config.final_answer == "cascade",
        )
        if self_id is not None and self_id in workflow.model_id[:-1]:
            raise WorkflowError(f"the conductor (id {self_id}) may only be the last step")
        if self_id is not None and workflow.model_id[-1] == self_id and workflow.final == len(workflow) - 1:
            raise WorkflowError("final names the conductor's own step, which gives no answer")
        if self_id is not None and workflow.model_id[-1] == self_id and cascade_trigger(workflow.final):
            raise WorkflowError("a cascade ends on an agent's answer, not on the conductor's own step")
        return workflow

    def _cascade_stop(self, workflow: Workflow) -> Callable[[Step], bool] | None:
        """A cascade's end: after a step whose answer its trigger does not fire on (None: no cascade)."""
        trigger = cascade_trigger(workflow.final)
        if trigger is None:
            return None
        checks, task = self.parts.checks, self.task
        if trigger != "failed-check":  # the others read the answer alone: no sandbox run for a check
            return lambda step: not fires(trigger, step.answer)
        return lambda step: not fires(trigger, step.answer, checks.check(task, step.answer))

    def _step_workflow(self, action: Any):
        if isinstance(action, ConductorAction):  # the plan and the generation that wrote it
            if action.completion is not None:
                self._conductor.append((action.completion, action.model))
            action = action.text
        text = encodable(action) if isinstance(action, str) else None  # no lone surrogates past here
        try:
            if text is None:
                raise WorkflowError(f"a workflow action is text, got {type(action).__name__}")
            workflow = self._parse(text)
        except WorkflowError as e:
            self._round(text, parse_error=str(e))
            traj = self._trajectory(None, False, 0.0, parse_error=str(e))
            spent = self._conductor_cost()  # the plan that failed to parse was paid for
            return self._finish(
                0.0,
                trajectory=traj,
                correct=False,
                final_answer=None,
                parse_error=str(e),
                rounds=list(self._rounds),
                depth=self._depth,
                cost=sum(self._step_cost(s) for s in self._steps) + spent,
                conductor_cost=spent,
            )
        if workflow is None:  # an inner round kept its parent's answer
            self._round(text, answer=self._answer_so_far())
            return self._end_workflow(self._workflow)
        self._workflow = workflow
        self._final = (
            workflow.final if workflow.final is not None else self._final_default,
            len(self._steps),
        )
        named = self.self_id is not None and workflow.model_id[-1] == self.self_id
        recurse = named or (self.config.recursion == "always" and self._depth < self.config.max_depth)
        run = workflow
        if named:
            run = Workflow(
                workflow.model_id[:-1], workflow.subtasks[:-1], workflow.access_list[:-1]
            )  # no cascade
        prior = tuple(self._steps[-1:])
        steps: tuple[Step, ...] = ()
        if len(run):
            steps = self.executor.run_workflow(
                self._context(), run, prior=prior, offset=len(self._steps), stop=self._cascade_stop(run)
            )
        self._steps.extend(steps)
        last = self._steps[-1] if self._steps else None
        self._round(
            text,
            workflow=format_workflow(workflow),
            steps=[s.index for s in steps],
            answer=self._answer_so_far(),
            recurse=recurse,
        )
        if not recurse:
            return self._end_workflow(workflow)
        self._depth += 1
        self._followup = Followup(
            parent=format_workflow(workflow),
            answer=(last.completion.text[-FOLLOWUP_ANSWER_CHARS:] if last else "(no answer yet)"),
            agent=last.agent_name if last else "-",
            depth=self._depth,
            max_depth=self.config.max_depth,
        )
        self._rewards.append(0.0)
        return (
            self._obs(),
            0.0,
            False,
            False,
            self._info(round=self._rounds[-1], depth=self._depth, steps=steps),
        )

    def _end_workflow(self, workflow: Workflow | None):
        answer, choice = self._workflow_final()
        correct = self._grade(answer)
        spent = self._conductor_cost()
        cost = sum(self._step_cost(s) for s in self._steps) + spent
        reward = conductor_reward(True, correct, cost, self._lam)
        traj = self._trajectory(answer, correct, reward, workflow=workflow, final_choice=choice)
        return self._finish(
            reward,
            trajectory=traj,
            correct=correct,
            final_answer=answer,
            parse_error=None,
            cost=cost,
            conductor_cost=spent,
            rounds=list(self._rounds),
            depth=self._depth,
        )
