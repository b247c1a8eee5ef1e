from django import forms


class OrderForm(forms.Form):
    customer_email = forms.EmailField(label="Your email")
    item = forms.CharField(max_length=200, initial="Rubber duck")
    quantity = forms.IntegerField(min_value=1, max_value=100, initial=1)
