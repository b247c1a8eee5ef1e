from django.contrib import messages
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from django_sqlq import enqueue
from shop.forms import OrderForm
from shop.models import Order


def order_form(request: HttpRequest) -> HttpResponse:
    """Place an order; its confirmation is sent in the background by the worker."""
    if request.method == "POST":
        form = OrderForm(request.POST)
        if form.is_valid():
            # The order and its job are written in one transaction: if anything fails before
            # the commit neither exists, so the worker never sees a job for a missing order.
            with transaction.atomic():
                order = Order.objects.create(**form.cleaned_data)
                enqueue("shop.send_order_confirmation", {"order_id": order.pk})
            messages.success(
                request,
                f"Order #{order.pk} placed. Its confirmation job is queued; "
                "reload to see the worker mark it sent.",
            )
            return redirect("order_form")
    else:
        form = OrderForm()
    recent_orders = Order.objects.all()[:10]
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
