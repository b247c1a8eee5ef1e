"""Payments. The order's charge (shop.charge_order, in jobs.py) asks the payment provider for
the payment, then waits, without holding a worker, for the provider to confirm it: the
provider POSTs to the shop's webhook (``views.payment_webhook``), which emits the order's
"payment confirmed" event (``django_sqlq.emit_event``). No confirmation within
``PAYMENT_TIMEOUT``: the charge cancels the order.

The example has no payment provider. With ``settings.SHOP_PAYMENT_SANDBOX`` on (the example's
settings), a job of the sandbox stands in for it and confirms each payment a moment later,
as the provider's webhook would."""

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from django_sqlq import emit_event, enqueue

#: How long an order waits for its payment before it is cancelled.
PAYMENT_TIMEOUT = timedelta(days=3)


def payment_confirmed(order_id: int) -> str:
    """The key of the event that confirms the payment of order ``order_id``."""
    return f"payment-confirmed:{order_id}"


def request_payment(order_id: int) -> dict[str, Any]:
    """Ask the provider for the order's payment; what the provider answers (a reference).

    Runs as a durable step of shop.charge_order: once per order, its result recorded. Its
    writes to the queue's database (here the sandbox's job) commit with that record, exactly
    once; the provider's API call would be at least once (repeated if the worker died after
    it and before the commit), so a real shop sends an idempotency key with it.
    """
    reference = f"pay_{order_id}"  # a real shop: provider.create_payment(..., idempotency_key=)
    if getattr(settings, "SHOP_PAYMENT_SANDBOX", False):
        enqueue("shop.sandbox_payment_provider", {"order_id": order_id, "reference": reference})
    return {"reference": reference}


def confirm_payment(order_id: int, reference: str) -> bool:
    """The provider confirmed the order's payment: emit its event, which wakes the order's
    charge at once (or waits for it, if the charge has not asked yet). True the first time;
    False for a confirmation sent again (providers retry webhooks): the first one wins."""
    return emit_event(
        payment_confirmed(order_id),
        {"reference": reference, "confirmed_at": timezone.now().isoformat()},
    )
