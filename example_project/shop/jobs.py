"""The shop's background jobs. `manage.py sqlq_worker` imports this module at start."""

import logging
from datetime import timedelta
from typing import Any

from django.utils import timezone

from django_sqlq import EventTimeout, handler
from django_sqlq.jobcontext import JobContext
from shop import payments
from shop.models import Order, PackedItem

logger = logging.getLogger(__name__)


@handler("shop.send_order_confirmation")
def send_order_confirmation(payload: dict[str, Any]) -> dict[str, Any]:
    """Send the order's confirmation (here: record that it was sent) and return a summary.

    Jobs are delivered at least once, so this is idempotent: a confirmation already sent
    is not sent again.
    """
    order = Order.objects.get(pk=payload["order_id"])
    if order.confirmation_sent_at is None:
        # A real shop would call django.core.mail.send_mail(...) here.
        order.confirmation_sent_at = timezone.now()
        order.save(update_fields=["confirmation_sent_at"])
        logger.info("Sent the confirmation of order #%s to %s", order.pk, order.customer_email)
    return {
        "order_id": order.pk,
        "sent_to": order.customer_email,
        "sent_at": order.confirmation_sent_at.isoformat(),
    }


@handler("shop.mark_order_paid", atomic=True)
def mark_order_paid(payload: dict[str, Any]) -> dict[str, Any]:
    """Record the order's payment, by hand (an operator enqueues it for an order paid some
    other way: a bank transfer the provider never saw). The shop's own orders are marked
    paid by shop.charge_order, once the provider confirmed their payment.

    ``atomic=True``: the worker runs this handler inside a transaction on the queue's
    database, and writes the job's completion in that same transaction. ``paid_at`` and the
    job's "completed" commit together or not at all: a worker that lost the job (frozen past
    its lease, another worker took it over) commits nothing, and a crash after the commit
    cannot leave the order paid with its job still to run. Only writes to this database are
    covered; an e-mail or an API call made here would still need to be idempotent.
    """
    order = Order.objects.select_for_update().get(pk=payload["order_id"])
    if order.paid_at is None:
        order.paid_at = timezone.now()
        order.save(update_fields=["paid_at"])
        logger.info("Order #%s paid", order.pk)
    return {"order_id": order.pk, "paid_at": order.paid_at.isoformat()}


# -- An order's fulfilment (shop/orders.py starts it): one shop.pack_item job per unit, run in
# parallel; once all of them have completed, the chain shop.charge_order -> shop.ship_order ->
# shop.email_receipt, one step after the other. The charge waits for the payment provider's
# confirmation (durable steps; see shop/payments.py). Each step is idempotent (delivery is at
# least once) and continues the chain even when it finds its work done: a step whose
# completion was lost runs again, and its next step is written with this completion, never
# twice.


@handler("shop.pack_item")
def pack_item(payload: dict[str, Any]) -> dict[str, Any]:
    """Pack one unit of an order (a warehouse picker's job). Idempotent: a unit already
    packed is not packed again."""
    item, created = PackedItem.objects.get_or_create(
        order_id=payload["order_id"], unit=payload["unit"]
    )
    if created:
        logger.info("Order #%s: packed unit %s", item.order_id, item.unit)
    return {"order_id": item.order_id, "unit": item.unit}


@handler("shop.charge_order", takes_context=True)
def charge_order(payload: dict[str, Any], context: JobContext) -> dict[str, Any]:
    """Charge the order: ask the payment provider for the payment, wait for the provider to
    confirm it (its webhook emits the order's event), mark the order paid, then continue its
    chain with shop.ship_order. No confirmation within ``PAYMENT_TIMEOUT`` (3 days): cancel
    the order instead, and end the chain.

    Enqueued by ``packing.then("shop.charge_order", ...)``: it is ``blocked`` until every
    shop.pack_item job of the order has completed. Its work is in durable steps: the wait
    ends the attempt (uncounted; the job is ``scheduled`` and holds no worker for those
    days), and when the event wakes it the handler runs again from the top: the steps it
    took already return what they recorded instead of running again (the provider is asked
    once). Steps cannot run in an atomic handler's transaction: this handler is not atomic;
    each step's writes commit with its record.
    """
    order_id = payload["order_id"]
    context.step("request-payment", payments.request_payment, order_id)
    try:
        confirmation = context.wait_for_event(
            "payment-confirmed",
            payments.payment_confirmed(order_id),
            timeout=payments.PAYMENT_TIMEOUT,
        )
    except EventTimeout:
        # Recorded: a later attempt of this job gets here again, never to the shipping,
        # even if a confirmation comes after the timeout.
        context.step("cancel", cancel_unpaid_order, order_id)
        return {"order_id": order_id, "cancelled": "no payment confirmed in time"}
    paid_at = context.step("mark-paid", mark_paid, order_id)
    context.continue_with("shop.ship_order", {"order_id": order_id})
    return {
        "order_id": order_id,
        "payment": confirmation["reference"],
        "paid_at": paid_at,
        "units_packed": PackedItem.objects.filter(order_id=order_id).count(),
    }


def mark_paid(order_id: int) -> str:
    """A step of shop.charge_order: set ``paid_at`` (once: it commits with the step)."""
    order = Order.objects.select_for_update().get(pk=order_id)
    if order.paid_at is None:
        order.paid_at = timezone.now()
        order.save(update_fields=["paid_at"])
        logger.info("Order #%s paid", order.pk)
    return order.paid_at.isoformat()


def cancel_unpaid_order(order_id: int) -> str:
    """A step of shop.charge_order: cancel an order whose payment never came. (A real shop
    would also put the stock back, and tell the customer.)"""
    order = Order.objects.select_for_update().get(pk=order_id)
    if order.cancelled_at is None:
        order.cancelled_at = timezone.now()
        order.save(update_fields=["cancelled_at"])
        logger.info("Order #%s cancelled: no payment confirmed in time", order.pk)
    return order.cancelled_at.isoformat()


@handler("shop.sandbox_payment_provider")
def sandbox_payment_provider(payload: dict[str, Any]) -> dict[str, Any]:
    """The example's stand-in for a payment provider (``settings.SHOP_PAYMENT_SANDBOX``):
    confirms the payment as the provider's webhook would (shop/payments.py)."""
    first = payments.confirm_payment(payload["order_id"], payload["reference"])
    return {"order_id": payload["order_id"], "confirmed": True, "first": first}


@handler("shop.ship_order", takes_context=True)
def ship_order(payload: dict[str, Any], context: JobContext) -> dict[str, Any]:
    """Hand the order to the carrier (the chain's second step), then continue with
    shop.email_receipt."""
    order = Order.objects.get(pk=payload["order_id"])
    if order.shipped_at is None:
        order.shipped_at = timezone.now()
        order.save(update_fields=["shipped_at"])
        logger.info("Order #%s shipped", order.pk)
    context.continue_with("shop.email_receipt", {"order_id": order.pk})
    return {"order_id": order.pk, "shipped_at": order.shipped_at.isoformat()}


@handler("shop.email_receipt")
def email_receipt(payload: dict[str, Any]) -> dict[str, Any]:
    """Email the receipt (the chain's last step: it does not continue)."""
    order = Order.objects.get(pk=payload["order_id"])
    if order.receipt_sent_at is None:
        # A real shop would call django.core.mail.send_mail(...) here.
        order.receipt_sent_at = timezone.now()
        order.save(update_fields=["receipt_sent_at"])
        logger.info("Sent the receipt of order #%s to %s", order.pk, order.customer_email)
    return {"order_id": order.pk, "sent_to": order.customer_email}


@handler("shop.resend_order_confirmation")
def resend_order_confirmation(payload: dict[str, Any]) -> dict[str, Any]:
    """Send the order's confirmation again, when the customer asks for it. Its view enqueues
    it with a unique_key, so a double submission of the button queues it once."""
    order = Order.objects.get(pk=payload["order_id"])
    # A real shop would call django.core.mail.send_mail(...) here.
    order.confirmation_sent_at = timezone.now()
    order.save(update_fields=["confirmation_sent_at"])
    logger.info("Sent the confirmation of order #%s to %s again", order.pk, order.customer_email)
    return {"order_id": order.pk, "sent_to": order.customer_email, "resent": True}


@handler("shop.rebuild_thumbnails", takes_context=True)
def rebuild_thumbnails(payload: dict[str, Any], context: Any) -> dict[str, Any]:
    """A long job (here: a pause per image) that reports its progress and can be cancelled.

    `context.set_progress()` costs nothing here: the worker writes the last value about
    once a second, and the admin shows it as a bar (job list, job page, dashboard). The
    admin's Cancel on the running job sets `context.cancel_requested` within a second;
    `context.check_cancelled()` then raises JobCancelled, and the job ends "cancelled".
    """
    import time

    total = int(payload.get("images", 100))
    pause = float(payload.get("seconds_each", 0.2))
    for done in range(total):
        context.check_cancelled()  # a checkpoint between two images, never inside one
        time.sleep(pause)  # a real shop would resize an image here
        context.set_progress((done + 1) / total, f"resized {done + 1} of {total}")
    return {"resized": total}


@handler("shop.nightly_sales_report")
def nightly_sales_report(payload: dict[str, Any]) -> dict[str, Any]:
    """A recurring job (SQLQ["SCHEDULE"]["nightly-sales-report"] in settings.py): the orders
    of the last ``days`` days. A real shop would email it; the admin shows the result."""
    since = timezone.now() - timedelta(days=payload.get("days", 1))
    orders = Order.objects.filter(created_at__gte=since)
    report = {
        "since": since.isoformat(),
        "orders": orders.count(),
        "items": sum(orders.values_list("quantity", flat=True)),
    }
    logger.info("Nightly sales report: %(orders)d orders, %(items)d items", report)
    return report
