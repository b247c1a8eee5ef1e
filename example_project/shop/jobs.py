"""The shop's background jobs. `manage.py sqlq_worker` imports this module at start."""

import logging
from datetime import timedelta
from typing import Any

from django.utils import timezone

from django_sqlq import handler
from django_sqlq.jobcontext import JobContext
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
    """Record the order's payment (a payment provider's webhook would enqueue this job; the
    shop's own orders are charged by shop.charge_order, which is atomic in the same way).

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
# shop.email_receipt, one step after the other. Each step is idempotent (delivery is at least
# once) and continues the chain even when it finds its work done: a step whose completion
# was lost runs again, and its next step is written with this completion, never twice.


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


@handler("shop.charge_order", atomic=True, takes_context=True)
def charge_order(payload: dict[str, Any], context: JobContext) -> dict[str, Any]:
    """Charge the order, then continue its chain with shop.ship_order.

    Enqueued by ``packing.then("shop.charge_order", ...)``: it is ``blocked`` until every
    shop.pack_item job of the order has completed. ``atomic=True``: ``paid_at``, this job's
    completion and the chain's next step (``context.continue_with()``) commit together, or
    none of them does.
    """
    order = Order.objects.select_for_update().get(pk=payload["order_id"])
    if order.paid_at is None:
        # A real shop would capture the payment here, with the job's id as the provider's
        # idempotency key (context.job_id).
        order.paid_at = timezone.now()
        order.save(update_fields=["paid_at"])
        logger.info("Order #%s charged", order.pk)
    context.continue_with("shop.ship_order", {"order_id": order.pk})
    return {
        "order_id": order.pk,
        "paid_at": order.paid_at.isoformat(),
        "units_packed": order.packed_items.count(),
    }


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
