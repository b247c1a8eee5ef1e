"""The shop's background jobs. `manage.py sqlq_worker` imports this module at start."""

import logging
from datetime import timedelta
from typing import Any

from django.utils import timezone

from django_sqlq import handler
from shop.models import Order

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
