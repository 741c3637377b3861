"""What the admin's live pages share (the Locks page, the Run-time schedules page): pages of their own templates,
built from the configured store rather than the model's rows, and errors reported as messages without secrets."""

from __future__ import annotations

from typing import Any, TypeVar

from django.contrib import messages
from django.db.models import Model
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import reverse

from ..conf import MutexcronSettings
from .display import ModelAdmin, current_settings, without_store_secrets

M = TypeVar("M", bound=Model)


def reason(error: Exception, conf: MutexcronSettings | None) -> str:
    """What went wrong, without the store URL's secrets (a KeyError's message without its quotes)."""
    text = str(error.args[0]) if isinstance(error, KeyError) and error.args else str(error)
    return without_store_secrets(text, conf)


class LivePageAdmin(ModelAdmin[M]):
    """An admin whose pages read and write the configured store: its changelist URL, page context and errors."""

    def _changelist_url(self) -> str:
        return reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_changelist",
                       current_app=self.admin_site.name)

    def _page_context(self, request: HttpRequest, title: str) -> dict[str, Any]:
        return {**self.admin_site.each_context(request), "opts": self.opts, "app_label": self.opts.app_label,
                "title": title, "subtitle": None}

    def _render(self, request: HttpRequest, template: str, title: str, **context: Any) -> HttpResponse:
        request.current_app = self.admin_site.name
        return TemplateResponse(request, template, {**self._page_context(request, title),
                                                    "changelist_url": self._changelist_url(), **context})

    def _fail(self, request: HttpRequest, what: str, error: Exception) -> HttpResponse:
        self.message_user(request, f"Could not {what}: {reason(error, current_settings())}", messages.ERROR)
        return redirect(self._changelist_url())
