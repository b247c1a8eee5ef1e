from django.contrib import messages
from django.db.models import Count
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from django_sqlq import enqueue
from shop.forms import OrderForm
from shop.models import Order
from shop.orders import place_order
from shop.payments import confirm_payment


def order_form(request: HttpRequest) -> HttpResponse:
    """Place an order; the worker confirms, packs, charges and ships it in the background."""
    if request.method == "POST":
        form = OrderForm(request.POST)
        if form.is_valid():
            # The order and its jobs are written in one transaction (see shop/orders.py).
            order = place_order(**form.cleaned_data)
            messages.success(
                request,
                f"Order #{order.pk} placed. Its confirmation, packing, charge, shipping and "
                "receipt jobs are queued; reload to see the worker go through them.",
            )
            return redirect("order_form")
    else:
        form = OrderForm()
    recent_orders = Order.objects.annotate(units_packed=Count("packed_items"))[:10]
    return render(request, "shop/order_form.html", {"form": form, "recent_orders": recent_orders})


@require_POST
def resend_confirmation(request: HttpRequest, pk: int) -> HttpResponse:
    """Send an order's confirmation again. A double-clicked button (or a second tab) posts
    twice: the job's unique_key makes the second post return the job the first one queued,
    so the customer gets one more email, not two."""
    order = get_object_or_404(Order, pk=pk)
    job = enqueue(
        "shop.resend_order_confirmation",
        {"order_id": order.pk},
        unique_key=f"shop.resend_order_confirmation:{order.pk}",
    )
    if job.created:
        messages.success(request, f"Order #{order.pk}: its confirmation will be sent again.")
    else:
        messages.info(
            request,
            f"Order #{order.pk}: a resend is already queued (job #{job.pk}); "
            "no second one was added.",
        )
    return redirect("order_form")


@csrf_exempt  # the provider's server posts here, with no CSRF token (its signature instead)
@require_POST
def payment_webhook(request: HttpRequest) -> HttpResponse:
    """The payment provider's webhook: POST ``order_id`` and ``reference`` once it confirmed
    the order's payment. It emits the order's "payment confirmed" event, which wakes its
    shop.charge_order job at once. A real shop checks the provider's signature first.

    Providers send a webhook again until they get a 2xx: the first confirmation wins
    (``emit_event()`` returns False for the others), and a repeat changes nothing. An order
    cancelled for want of payment gets 409: its charge no longer takes the event (a real shop
    refunds the payment)."""
    try:
        order_id = int(request.POST["order_id"])
    except (KeyError, ValueError):
        return JsonResponse({"error": "order_id is required"}, status=400)
    order = get_object_or_404(Order, pk=order_id)
    if order.cancelled_at is not None:
        return JsonResponse({"order_id": order.pk, "error": "order cancelled"}, status=409)
    first = confirm_payment(order.pk, request.POST.get("reference", ""))
    return JsonResponse({"order_id": order.pk, "confirmed": True, "first": first})
