"""The shop's tests, written the way an application tests code that enqueues: with
django_sqlq.testing, in plain TestCases (no worker process, no real commits).

    python example_project/manage.py test shop
"""

from datetime import timedelta
from io import StringIO
from unittest import mock

from django.core.management import call_command
from django.test import TestCase, override_settings
from django.utils import timezone

from django_sqlq import Chain, enqueue
from django_sqlq.models import Job
from django_sqlq.testing import assert_enqueued, inline, refute_enqueued, run_job, run_jobs
from shop.models import Order, PackedItem
from shop.orders import place_order
from shop.payments import PAYMENT_TIMEOUT

ORDER = {"customer_email": "ada@example.com", "item": "Teapot", "quantity": 2}


def run_all() -> tuple[int, int]:
    """Run jobs until none is left to run: (completed, failed). The charge waits for its
    payment's confirmation (an attempt that ends uncounted); a run_jobs() call does not run
    again a job that went to sleep in it, even once the event has woken it: the next call
    does."""
    completed = failed = 0
    while (outcome := run_jobs()).ran:
        completed, failed = completed + outcome.completed, failed + outcome.failed
    return completed, failed


class OrderFormTests(TestCase):
    def test_placing_an_order_enqueues_its_confirmation(self):
        response = self.client.post("/", ORDER)
        self.assertRedirects(response, "/")
        order = Order.objects.get()
        assert_enqueued("shop.send_order_confirmation", payload={"order_id": order.pk}, count=1)
        self.assertIsNone(order.confirmation_sent_at)

    def test_an_invalid_order_enqueues_nothing(self):
        self.client.post("/", {**ORDER, "customer_email": "not an email"})
        self.assertFalse(Order.objects.exists())
        refute_enqueued("shop.send_order_confirmation")

    def test_the_worker_sends_the_confirmation(self):
        self.client.post("/", ORDER)
        # The confirmation, two units packed, then charge -> ship -> receipt (and the
        # payment sandbox's confirmation, which the charge waits for).
        self.assertEqual(run_all(), (7, 0))
        order = Order.objects.get()
        self.assertIsNotNone(order.confirmation_sent_at)
        self.assertIsNotNone(order.receipt_sent_at)
        refute_enqueued()
        self.assertFalse(Job.objects.blocked().exists())

    def test_a_confirmation_is_sent_once_even_if_the_job_runs_twice(self):
        self.client.post("/", ORDER)
        order = Order.objects.get()
        run_jobs()
        sent_at = Order.objects.get().confirmation_sent_at
        # Delivery is at least once: a second run of the same job changes nothing.
        enqueue("shop.send_order_confirmation", {"order_id": order.pk})
        run_jobs()
        self.assertEqual(Order.objects.get().confirmation_sent_at, sent_at)


class PaymentTests(TestCase):
    def test_an_order_is_marked_paid_by_an_atomic_job(self):
        from django_sqlq import registry

        self.assertTrue(registry.get("shop.mark_order_paid").atomic)
        order = Order.objects.create(**ORDER)
        enqueue("shop.mark_order_paid", {"order_id": order.pk})
        outcome = run_jobs()
        self.assertEqual((outcome.completed, outcome.failed), (1, 0))
        paid_at = Order.objects.get().paid_at
        self.assertIsNotNone(paid_at)
        # Run again (delivery is at least once): still paid once.
        enqueue("shop.mark_order_paid", {"order_id": order.pk})
        run_jobs()
        self.assertEqual(Order.objects.get().paid_at, paid_at)


class FulfilmentTests(TestCase):
    """An order's jobs: one shop.pack_item per unit (a group), then, once all of them have
    completed, the chain shop.charge_order -> shop.ship_order -> shop.email_receipt."""

    def place(self, quantity: int = 3) -> Order:
        return place_order(**{**ORDER, "quantity": quantity})

    def charge_job(self, order: Order) -> Job:
        return Job.objects.get(type="shop.charge_order", payload__order_id=order.pk)

    def test_an_order_is_packed_then_charged_shipped_and_emailed(self):
        order = self.place(quantity=3)
        assert_enqueued("shop.pack_item", payload={"order_id": order.pk}, count=3)
        self.assertEqual(self.charge_job(order).status, "blocked")

        # The confirmation, 3 units, the payment sandbox's confirmation, then the chain.
        self.assertEqual(run_all(), (1 + 3 + 1 + 3, 0))
        order.refresh_from_db()
        self.assertEqual(sorted(order.packed_items.values_list("unit", flat=True)), [1, 2, 3])
        self.assertLessEqual(order.paid_at, order.shipped_at)
        self.assertLessEqual(order.shipped_at, order.receipt_sent_at)
        # The charge ran after every unit was packed.
        charge = self.charge_job(order)
        self.assertEqual(charge.result["units_packed"], 3)
        # Its chain: three steps, in order, each completed once.
        steps = list(Chain(charge.pk).jobs())
        self.assertEqual(
            [(s.chain_index, s.type, s.status) for s in steps],
            [
                (0, "shop.charge_order", "completed"),
                (1, "shop.ship_order", "completed"),
                (2, "shop.email_receipt", "completed"),
            ],
        )
        self.assertEqual(Job.objects.filter(type="shop.ship_order").count(), 1)
        refute_enqueued()

    def test_the_charge_waits_for_the_last_unit(self):
        order = self.place(quantity=3)
        packs = list(Job.objects.filter(type="shop.pack_item").order_by("id"))
        run_job(packs[0])
        run_job(packs[2])
        self.assertEqual(self.charge_job(order).status, "blocked")
        self.assertEqual(run_job(self.charge_job(order)), None)  # never claimed while blocked
        run_job(packs[1])
        self.assertEqual(self.charge_job(order).status, "pending")
        assert_enqueued("shop.charge_order", payload={"order_id": order.pk}, count=1)

    def test_a_unit_that_cannot_be_packed_fails_the_charge(self):
        order = self.place(quantity=2)
        with mock.patch.object(
            PackedItem.objects, "get_or_create", side_effect=RuntimeError("out of boxes")
        ):
            outcome = run_jobs(with_scheduled=True)  # every attempt, retries included
        self.assertEqual(outcome.failed, 2)
        charge = self.charge_job(order)
        self.assertEqual(charge.status, "failed")
        self.assertIn("DependencyFailed", charge.last_error)
        order.refresh_from_db()
        self.assertIsNone(order.paid_at)
        self.assertFalse(Job.objects.filter(type="shop.ship_order").exists())

    def test_a_step_that_runs_again_changes_nothing_and_continues_once(self):
        order = self.place(quantity=1)
        run_all()
        shipped_at = Order.objects.get().shipped_at
        self.assertIsNotNone(shipped_at)
        # Delivery is at least once: the step runs again (here, enqueued by hand).
        again = enqueue("shop.ship_order", {"order_id": order.pk})
        run_jobs()
        self.assertEqual(Order.objects.get().shipped_at, shipped_at)
        # It still continues its own chain (a step whose completion was lost must).
        self.assertEqual(
            [s.type for s in Chain(again.pk).jobs()], ["shop.ship_order", "shop.email_receipt"]
        )


@override_settings(SHOP_PAYMENT_SANDBOX=False)  # the test plays the payment provider
class PaymentWebhookTests(TestCase):
    """shop.charge_order asks for the payment (a durable step), then waits for the provider's
    webhook to emit the order's "payment confirmed" event, or cancels the order after
    PAYMENT_TIMEOUT."""

    def setUp(self):
        self.order = place_order(**{**ORDER, "quantity": 1})
        self.charge = Job.objects.get(type="shop.charge_order")

    def webhook(self, order_id: int, reference: str = "pay_1"):
        return self.client.post(
            "/payments/webhook/", {"order_id": order_id, "reference": reference}
        )

    def test_the_charge_waits_for_the_webhook_then_ships(self):
        outcome = run_jobs()
        self.assertEqual((outcome.completed, outcome.slept), (2, 1))  # confirmation, packing
        self.charge.refresh_from_db()
        # Asleep until the timeout, its attempt not counted; the order not paid yet.
        self.assertEqual((self.charge.status, self.charge.attempts), ("scheduled", 0))
        self.assertAlmostEqual(
            self.charge.scheduled_at, timezone.now() + PAYMENT_TIMEOUT, delta=timedelta(minutes=1)
        )
        self.assertIsNone(Order.objects.get().paid_at)
        self.assertEqual(run_jobs().ran, 0)  # nothing to do until the provider calls

        response = self.webhook(self.order.pk)
        self.assertEqual(
            response.json(), {"order_id": self.order.pk, "confirmed": True, "first": True}
        )
        self.charge.refresh_from_db()
        self.assertEqual(self.charge.status, "pending")  # woken at once
        # The provider sends its webhook again: the first confirmation won.
        self.assertFalse(self.webhook(self.order.pk, "pay_other").json()["first"])

        self.assertEqual(run_all(), (3, 0))  # charge -> ship -> receipt
        order = Order.objects.get()
        self.assertIsNotNone(order.paid_at)
        self.assertIsNotNone(order.receipt_sent_at)
        self.assertIsNone(order.cancelled_at)
        self.charge.refresh_from_db()
        self.assertEqual((self.charge.attempts, self.charge.result["payment"]), (1, "pay_1"))

    def test_an_order_without_payment_is_cancelled_after_the_timeout(self):
        run_jobs()
        # Three days later (run_jobs' clock): the wait times out, the order is cancelled.
        outcome = run_jobs(now=timezone.now() + PAYMENT_TIMEOUT + timedelta(minutes=1))
        self.assertEqual(outcome.completed, 1)
        self.charge.refresh_from_db()
        self.assertEqual(self.charge.status, "completed")
        self.assertEqual(self.charge.result["cancelled"], "no payment confirmed in time")
        order = Order.objects.get()
        self.assertIsNotNone(order.cancelled_at)
        self.assertIsNone(order.paid_at)
        self.assertFalse(Job.objects.filter(type="shop.ship_order").exists())
        # A confirmation that comes too late is refused, and ships nothing.
        self.assertEqual(self.webhook(self.order.pk).status_code, 409)
        self.assertEqual(run_all(), (0, 0))

    def test_the_webhook_needs_an_order(self):
        self.assertEqual(self.client.post("/payments/webhook/", {}).status_code, 400)
        self.assertEqual(self.webhook(self.order.pk + 100).status_code, 404)
        self.assertEqual(self.client.get("/payments/webhook/").status_code, 405)


class ResendTests(TestCase):
    def test_a_double_submitted_resend_queues_one_job(self):
        order = Order.objects.create(**ORDER)
        first = self.client.post(f"/orders/{order.pk}/resend/", follow=True)
        second = self.client.post(f"/orders/{order.pk}/resend/", follow=True)
        assert_enqueued("shop.resend_order_confirmation", payload={"order_id": order.pk}, count=1)
        self.assertContains(first, "will be sent again")
        self.assertContains(second, "a resend is already queued")
        # Once that job has run, the button queues a new one.
        outcome = run_jobs()
        self.assertEqual((outcome.completed, outcome.failed), (1, 0))
        self.client.post(f"/orders/{order.pk}/resend/")
        assert_enqueued("shop.resend_order_confirmation", count=1)


@inline()
class InlineModeTests(TestCase):
    def test_sample_orders_are_confirmed_and_fulfilled_at_once(self):
        call_command("shop_sample_orders", 3, stdout=StringIO())
        self.assertEqual(Order.objects.filter(confirmation_sent_at__isnull=False).count(), 3)
        self.assertEqual(Order.objects.filter(paid_at__isnull=False).count(), 3)
        self.assertEqual(Order.objects.filter(receipt_sent_at__isnull=False).count(), 3)
        units = sum(Order.objects.values_list("quantity", flat=True))
        self.assertEqual(PackedItem.objects.count(), units)


class LongJobTests(TestCase):
    def test_the_thumbnail_job_reports_progress_and_finishes(self):
        call_command("shop_rebuild_thumbnails", images=3, seconds_each=0, stdout=StringIO())
        outcome = run_jobs()
        self.assertEqual((outcome.completed, outcome.failed), (1, 0))


class NightlyReportTests(TestCase):
    def test_the_nightly_report_is_a_valid_schedule_and_runs(self):
        from django_sqlq import schedules

        schedule = schedules.load()["nightly-sales-report"]
        self.assertEqual((schedule.cron, schedule.timezone), ("0 3 * * *", "Europe/Paris"))
        schedules.check_targets({"nightly-sales-report": schedule})  # its handler exists
        Order.objects.create(**ORDER)
        enqueue(schedule.type, schedule.payload)
        outcome = run_jobs()
        self.assertEqual(outcome.completed, 1)

    def test_the_admin_lists_it(self):
        from django.contrib.auth.models import User

        self.client.force_login(User.objects.create_superuser("admin", "a@example.com", "pw"))
        page = self.client.get("/admin/django_sqlq/scheduletick/")
        self.assertContains(page, "nightly-sales-report")
        self.assertContains(page, "Europe/Paris")


class MetricsTests(TestCase):
    """The opt-in Prometheus view that urls.py includes."""

    def test_the_metrics_url_is_included_and_closed_to_anonymous_clients(self):
        from django.urls import reverse

        self.assertEqual(reverse("django_sqlq:metrics"), "/sqlq/metrics")
        self.assertEqual(self.client.get("/sqlq/metrics").status_code, 403)
